// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the asynchronous parts: completing a handler on its own executor, and
// running an asynchronous operation to completion for the blocking overloads.
#pragma once

#include <sluice/error.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>

#include <tuple>
#include <utility>

namespace sluice::detail {

/// Invokes `handler(args...)` through its associated executor, never inline from the
/// initiating function (Asio's rule: an operation does not complete inside its initiation).
template <class Handler, class... Args>
void post_completion(Handler&& handler, Args&&... args) {
  auto executor = boost::asio::get_associated_executor(handler);
  boost::asio::post(
      executor, [h = std::forward<Handler>(handler), values = std::make_tuple(std::forward<Args>(args)...)]() mutable {
        std::apply(std::move(h), std::move(values));
      });
}

/// Runs `work()`, which blocks and returns the handler's arguments as a tuple, on `where` (on the
/// handler's associated executor when `where` is empty), then invokes the handler with them
/// through its associated executor, which counts as having work until then. The body of the
/// transports whose underlying calls block (file reads): a host that runs them asynchronously
/// gives them an executor meant for blocking work.
template <class Handler, class Work>
void complete_after_blocking(const boost::asio::any_io_executor& where, Handler&& handler, Work&& work) {
  auto home = boost::asio::prefer(boost::asio::get_associated_executor(handler),
                                  boost::asio::execution::outstanding_work.tracked);
  auto run = [home, h = std::forward<Handler>(handler), w = std::forward<Work>(work)]() mutable {
    boost::asio::post(home,
                      [h = std::move(h), values = w()]() mutable { std::apply(std::move(h), std::move(values)); });
  };
  if (where) {
    boost::asio::post(where, std::move(run));
  } else {
    boost::asio::post(home, std::move(run));
  }
}

/// Runs `initiate(handler)` on a private io_context until the handler ran, and returns what
/// the handler received after the error code. The body of every blocking overload: it works
/// whether or not anybody runs the executors of the parts, and never blocks a thread of theirs.
template <class Result, class Initiate>
Result run_blocking(Initiate&& initiate, error_code& ec) {
  boost::asio::io_context context;
  Result result{};
  std::forward<Initiate>(initiate)(boost::asio::bind_executor(context, [&](error_code e, Result r) {
    ec = e;
    result = std::move(r);
  }));
  context.run();
  return result;
}

}  // namespace sluice::detail
