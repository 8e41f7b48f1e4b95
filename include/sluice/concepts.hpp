// The four parts a sluice path is made of, as C++20 concepts. Each has a requirements page
// in docs/requirements/ and a minimal model used by the tests.
#pragma once

#include <sluice/error.hpp>
#include <sluice/region.hpp>
#include <sluice/request.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
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

/// A store that can lend a published object's bytes in place (no copy out): `map` returns a
/// mapping that keeps that version of the object alive and readable while it exists.
template <class S>
concept mappable_store = object_store<S> && requires(S& s, const object_ref& obj, error_code& ec) {
  typename S::mapping_type;
  { s.map(obj, ec) } -> std::same_as<typename S::mapping_type>;
  requires requires(const typename S::mapping_type& m) {
    { m.region() } -> std::convertible_to<const_region>;
    { m.info() } -> std::convertible_to<const object_info&>;
  };
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
/// Optional members the server uses when a store has them (docs/requirements/object_store.md):
/// map_unconfirmed/confirm, describe, map_range, map_streaming, and on a mapping
/// native_handle/data_offset (sendfile) and ready (a mapping still being filled).
template <class S>
concept servable_store = multipart_store<S> && mappable_store<S>;

}  // namespace sluice
