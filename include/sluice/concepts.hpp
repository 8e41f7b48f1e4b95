// SPDX-License-Identifier: Apache-2.0
// The four parts a sluice path is made of, as C++20 concepts. Each has a requirements page
// in docs/requirements/ and a minimal model used by the tests.
#pragma once

#include <sluice/error.hpp>
#include <sluice/region.hpp>
#include <sluice/request.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace sluice {

/// Which bytes a transport moves: `length` bytes between local offset `local_offset` of a
/// registration and remote offset `remote_offset` of a remote descriptor.
struct transfer_span {
  std::uint64_t local_offset = 0;
  std::uint64_t remote_offset = 0;
  std::uint64_t length = 0;
  friend bool operator==(const transfer_span&, const transfer_span&) = default;
};

namespace detail {

/// Completion handlers with the signatures the concepts demand; used only inside requires-expressions.
struct transport_handler_archetype {
  void operator()(error_code, std::size_t) {}
};
template <class Session>
struct negotiate_handler_archetype {
  void operator()(error_code, Session) {}
};
struct complete_handler_archetype {
  void operator()(error_code, const transfer_result&) {}
};

}  // namespace detail

/// Something that has a name a transfer_result can report.
template <class T>
concept named_part = requires {
  { T::name } -> std::convertible_to<std::string_view>;
};

/// A registration: proof that a region is reachable by some transport. Move-only; its
/// destructor undoes the registration. An empty registration (after an error) has an empty region.
template <class G>
concept registration = std::move_constructible<G> &&(!std::copy_constructible<G>)&&requires(const G& g) {
  { g.region() } -> std::convertible_to<region>;
};

/// A registrar turns a region into a registration. On error it sets `ec` and returns an
/// empty registration.
template <class R>
concept registrar = requires(R& r, const region& mem, error_code& ec) {
  typename R::registration_type;
  requires registration<typename R::registration_type>;
  { r.register_region(mem, ec) } -> std::same_as<typename R::registration_type>;
};

/// A transport moves bytes between a local registration of type `G` and a remote descriptor
/// (`T::remote_type`). Both operations are asynchronous with completion signature
/// `void(error_code, std::size_t bytes)`; a span outside the local region fails with
/// errc::region_too_small, outside the remote with errc::bad_range, and writes nothing.
template <class T, class G>
concept transport = registration<G> && named_part<T> &&
    requires(T& t, const G& local, const typename T::remote_type& remote, transfer_span span) {
  t.async_read(local, remote, span, detail::transport_handler_archetype{});   // remote → local
  t.async_write(local, remote, span, detail::transport_handler_archetype{});  // local → remote
};

/// A negotiation in progress: what to move (remote descriptor and span) until completed.
template <class S, class Remote>
concept negotiation_session = std::move_constructible<S> && requires(const S& s) {
  { s.remote() } -> std::convertible_to<const Remote&>;
  { s.span() } -> std::same_as<transfer_span>;
};

/// A negotiator agrees with the other end what moves where (async_negotiate: completes with
/// `void(error_code, session_type)`), and ends the agreement once the transport ran
/// (async_complete: publishes or releases; completes with `void(error_code, transfer_result)`).
template <class N>
concept negotiator = named_part<N> && requires {
  typename N::remote_type;
} && negotiation_session<typename N::session_type, typename N::remote_type> &&
    requires(N& n, const transfer_request& req, typename N::session_type&& session, error_code ec,
             std::uint64_t bytes) {
  n.async_negotiate(req, detail::negotiate_handler_archetype<typename N::session_type>{});
  n.async_complete(std::move(session), ec, bytes, detail::complete_handler_archetype{});
};

/// A negotiator whose remote descriptors are what transport `T` moves to and from: the pair
/// can be composed into one path.
template <class N, class T>
concept negotiates_for = negotiator<N> && std::same_as<typename N::remote_type, typename T::remote_type>;

/// A writer stages one object; commit publishes it atomically (readers see the old object or
/// the whole new one, never part), destruction without commit discards it.
template <class W>
concept object_writer = std::move_constructible<W> &&
    requires(W& w, std::span<const std::byte> data, const object_attributes& attrs, error_code& ec) {
  w.write(data, ec);
  { w.commit(attrs, ec) } -> std::same_as<object_info>;
};

/// Server-side storage: buckets and objects, ranged reads into a caller's buffer, atomic
/// publish through a writer. Calls are blocking. What runs where is the caller's choice; the S3
/// server's is written at servable_store.
template <class S>
concept object_store = object_writer<typename S::writer_type> &&
    requires(S& s, const object_ref& obj, std::string_view bucket, std::uint64_t offset, std::span<std::byte> out,
             const list_request& list, error_code& ec) {
  s.create_bucket(bucket, ec);
  s.remove_bucket(bucket, ec);
  { s.list_buckets(ec) } -> std::same_as<std::vector<bucket_info>>;
  { s.head(obj, ec) } -> std::same_as<object_info>;
  { s.read(obj, offset, out, ec) } -> std::same_as<std::size_t>;
  { s.begin_put(obj, ec) } -> std::same_as<typename S::writer_type>;
  s.remove(obj, ec);
  { s.list(list, ec) } -> std::same_as<list_result>;
};

/// One published version of an object, lent in place: its bytes (read only) and its info.
template <class M>
concept object_mapping = requires(const M& m) {
  { m.region() } -> std::convertible_to<const_region>;
  { m.info() } -> std::convertible_to<const object_info&>;
};

/// A store that can lend a published object's bytes in place (no copy out): `map` returns a
/// mapping that keeps that version of the object alive and readable while it exists.
template <class S>
concept mappable_store = object_store<S> && requires(S& s, const object_ref& obj, error_code& ec) {
  typename S::mapping_type;
  { s.map(obj, ec) } -> std::same_as<typename S::mapping_type>;
  requires object_mapping<typename S::mapping_type>;
};

/// A store that stages multipart uploads: parts are written independently (any order, any
/// part replaced until completion) and completion publishes their concatenation atomically.
/// A part writer is an object_writer whose commit publishes the part (its object_info carries
/// the part's size and ETag). Errors: no_such_bucket, no_such_upload, invalid_part (missing part
/// or ETag mismatch), invalid_part_order; an aborted or completed upload leaves no parts behind.
template <class S>
concept multipart_store = object_store<S> && object_writer<typename S::part_writer_type> &&
    requires(S& s, const object_ref& obj, std::string_view bucket, std::string_view prefix, std::string_view upload_id,
             std::uint32_t part_number, const object_attributes& attrs, std::span<const part_info> chosen,
             error_code& ec) {
  { s.create_upload(obj, attrs, ec) } -> std::same_as<std::string>;
  { s.begin_part(obj, upload_id, part_number, ec) } -> std::same_as<typename S::part_writer_type>;
  { s.list_parts(obj, upload_id, ec) } -> std::same_as<std::vector<part_info>>;
  { s.list_uploads(bucket, prefix, ec) } -> std::same_as<std::vector<upload_info>>;
  { s.complete_upload(obj, upload_id, chosen, attrs, ec) } -> std::same_as<object_info>;
  s.abort_upload(obj, upload_id, ec);
};

/// What `s3::server<Store>` serves: a multipart store whose objects it can map (GET bodies,
/// RDMA writes and same-host grants read the mapping in place; copies and ranged reads too).
/// Which thread calls what:
/// - calls that answer from memory or the page cache run on the connection's network thread:
///   head, map, list, list_buckets, remove, create_upload, begin_put, begin_part and a writer's
///   write. A local store must answer them without waiting for a flush to disk or a network;
/// - calls that may wait for the disk run on the server's blocking pool: a writer's commit
///   (fsync), complete_upload, and the copies of CopyObject and UploadPartCopy;
/// - a store that declares `static constexpr bool remote = true` (gateway_store: a read may ask
///   its upstream) has every call run on the blocking pool.
/// Optional capabilities the server uses when a store models them are the concepts below.
template <class S>
concept servable_store = multipart_store<S> && mappable_store<S>;

// Optional capabilities. The S3 server uses each one a store (or its writer or mapping) models,
// and does without it otherwise (s3::any_store::wrap checks them; the table is in
// docs/requirements/object_store.md). A member that is there but misses its concept (a wrong
// parameter, a wrong return type) is not used: tests/unit/concepts_test.cpp asserts which ones
// each shipped store models.

/// A store whose calls may wait for a network (`static constexpr bool remote = true`): the
/// server makes every call of it on its blocking pool, never on a network thread.
template <class S>
concept remote_store = object_store<S> && requires {
  requires S::remote;
};

/// A store that keeps who created a bucket with it (`create_bucket(bucket, owner, ec)`, owner an
/// access key id): the server's CreateBucket passes the requester, so ownership survives a restart.
template <class S>
concept owner_recording_store = object_store<S> &&
    requires(S& s, std::string_view bucket, std::string_view owner, error_code& ec) {
  s.create_bucket(bucket, owner, ec);
};

/// A store that reads a bucket's owner back (`bucket_owner(bucket)`, nullopt when unknown): at
/// start, the server gives each existing bucket that owner (else its first user).
template <class S>
concept owner_reporting_store = object_store<S> && requires(S& s, std::string_view bucket) {
  { s.bucket_owner(bucket) } -> std::convertible_to<std::optional<std::string>>;
};

/// A store that keeps a bucket's settings with it (`bucket_settings_of(bucket, ec)`, and
/// `set_bucket_settings(bucket, settings, ec)`, which replaces them): the server's
/// GetBucketLocation returns the LocationConstraint CreateBucket gave, and bucket tagging works.
/// Errors: no_such_bucket.
template <class S>
concept settings_keeping_store = object_store<S> &&
    requires(S& s, std::string_view bucket, const bucket_settings& settings, error_code& ec) {
  { s.bucket_settings_of(bucket, ec) } -> std::same_as<bucket_settings>;
  s.set_bucket_settings(bucket, settings, ec);
};

/// A store that answers a HEAD without the bytes (`describe(obj, ec)`: a mapping whose region
/// may be empty): the server's HEAD uses it instead of map, so nothing is read or fetched.
template <class S>
concept describing_store = mappable_store<S> && requires(S& s, const object_ref& obj, error_code& ec) {
  { s.describe(obj, ec) } -> object_mapping;
};

/// A store that maps part of an object for an HTTP Range header (`map_range(obj, range, ec)`;
/// the mapping's base() says where its region starts): the server's ranged GET uses it instead
/// of map, so an object not held whole need not be fetched whole.
template <class S>
concept range_mapping_store = mappable_store<S> &&
    requires(S& s, const object_ref& obj, std::string_view range, error_code& ec) {
  { s.map_range(obj, range, ec) } -> object_mapping;
};

/// A store that answers a map before all bytes are there (`map_streaming(obj, ec)`, a
/// growing_mapping): the server's GET uses it instead of map and sends bytes as they arrive.
template <class S>
concept streaming_store = mappable_store<S> && requires(S& s, const object_ref& obj, error_code& ec) {
  { s.map_streaming(obj, ec) } -> object_mapping;
};

/// Runs a job later on a thread that may block (the S3 server's blocking pool), from any thread:
/// where an asynchronous store operation (async_mapping_store) makes its blocking calls.
using blocking_runner = std::function<void(std::function<void()>)>;

/// A streaming, describing store whose GET and HEAD wait without holding a thread
/// (`async_map_streaming(obj, run, done)`, `async_describe(obj, run, done)`): what map_streaming
/// or describe answers, given to `done` (a `std::function<void(error_code, S::mapping_type)>`)
/// once, on any thread. Its blocking calls (a remote store's upstream) run as jobs given to `run`;
/// while it waits for something another operation does (a fetch of the same object under way) no
/// thread waits: the server awaits it, and its blocking pool stays free for other requests.
template <class S>
concept async_mapping_store = streaming_store<S> && describing_store<S> &&
    requires(S& s, const object_ref& obj, blocking_runner run,
             std::function<void(error_code, typename S::mapping_type)> done) {
  s.async_map_streaming(obj, run, done);
  s.async_describe(obj, std::move(run), std::move(done));
};

/// A store that lends a copy it has not checked yet (`map_unconfirmed(obj, if_match)`, for a GET
/// whose If-Match header is `if_match`, empty when it has none; nullopt when the store has no
/// copy to lend) and checks it later (`confirm(obj, mapping)`): the server moves the bytes while
/// the store asks whether they are current, and answers only once confirm says so (else it
/// retries by map).
template <class S>
concept speculating_store = mappable_store<S> &&
    requires(S& s, const object_ref& obj, std::string_view if_match, const typename S::mapping_type& m) {
  { s.map_unconfirmed(obj, if_match) } -> std::same_as<std::optional<typename S::mapping_type>>;
  { s.confirm(obj, m) } -> std::convertible_to<bool>;
};

/// A multipart store that checks a write precondition (If-Match, If-None-Match) when it publishes
/// a completed upload (`complete_upload(..., ec, precondition)`): atomically with the publish,
/// where otherwise the server checks it before.
template <class S>
concept conditional_upload_store = multipart_store<S> &&
    requires(S& s, const object_ref& obj, std::string_view upload_id, std::span<const part_info> chosen,
             const object_attributes& attrs, error_code& ec, const write_precondition& precondition) {
  { s.complete_upload(obj, upload_id, chosen, attrs, ec, precondition) } -> std::same_as<object_info>;
};

/// A writer that checks a write precondition at commit (`require(precondition)`, before the
/// first write): the server's conditional PUT then holds atomically with the publish.
template <class W>
concept conditional_writer = object_writer<W> && requires(W& w, const write_precondition& precondition) {
  w.require(precondition);
};

/// A mapping that may hold only part of its object (`base()`: the object's offset where
/// region() starts): the server's ranged GET reads the range at that offset.
template <class M>
concept partial_mapping = object_mapping<M> && requires(const M& m) {
  { m.base() } -> std::convertible_to<std::uint64_t>;
};

/// A mapping whose bytes lie in a file (`native_handle()`: its descriptor, or -1): the server
/// sends plain-HTTP bodies from it with sendfile, and keys registration caches by its inode.
template <class M>
concept file_backed_mapping = object_mapping<M> && requires(const M& m) {
  { m.native_handle() } -> std::convertible_to<int>;
};

/// A file_backed_mapping whose object starts past the file's first byte (`data_offset()`, where
/// byte 0 of the object is): the server's sendfile and RDMA file reads start there.
template <class M>
concept offset_file_mapping = file_backed_mapping<M> && requires(const M& m) {
  { m.data_offset() } -> std::convertible_to<std::uint64_t>;
};

/// A mapping still being filled (a gateway's miss): `ready(end)` says whether bytes [0, end) of
/// region() are there; `async_wait_until(end, done)` calls `done` once, with no error when they
/// are or with the error that ended the fill first, on any thread (at once when it knows). The
/// server awaits each slice before it sends it, and no thread waits meanwhile.
template <class M>
concept growing_mapping = object_mapping<M> &&
    requires(const M& m, std::uint64_t end, std::function<void(error_code)> done) {
  { m.ready(end) } -> std::convertible_to<bool>;
  m.async_wait_until(end, std::move(done));
};

}  // namespace sluice
