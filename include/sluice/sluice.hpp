// SPDX-License-Identifier: Apache-2.0
// The core of sluice in one include: vocabulary, concepts, path, any_path and the
// in-process models (loopback transport, host registrar, local negotiator, memory store).
#pragma once

#include <sluice/any_path.hpp>
#include <sluice/concepts.hpp>
#include <sluice/config.hpp>
#include <sluice/error.hpp>
#include <sluice/fallback_path.hpp>
#include <sluice/host_registrar.hpp>
#include <sluice/local_negotiator.hpp>
#include <sluice/loopback.hpp>
#include <sluice/memory_store.hpp>
#include <sluice/names.hpp>
#include <sluice/path.hpp>
#include <sluice/region.hpp>
#include <sluice/request.hpp>
