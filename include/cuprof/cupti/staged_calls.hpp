// What the record store (record_store.hpp) stages a CUDA call as: the call
// recorder's report made a compact staged_call, times still in ticks, its
// kind decided once per callback id, and a driver call made inside a runtime
// call on the same thread (cudaLaunchKernel -> cuLaunchKernel) folded into
// it, as torch shows only the outer call. Plain data and logic, apart from
// CUPTI.
#pragma once

#include "../base/chunked_vector.hpp"
#include "../model/api_vocabulary.hpp"
#include "../model/event.hpp"
#include "../model/string_table.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cuprof::detail::cupti {

// A CUDA call as the call recorder (call_recorder.hpp) reports it, times in ticks.
struct call_record {
  std::uint64_t start = 0, end = 0;
  std::uint32_t tid = 0, cbid = 0, correlation = 0;
  std::int32_t return_value = 0;
  api_domain domain = api_domain::runtime;
  // For a synchronization call, what CUPTI's SYNCHRONIZATION record would hold:
  // its kind (synchronization_kind()), the call's context and the stream waited
  // on (0 where none applies: a context or event sync).
  std::uint8_t sync_kind = 0;
  std::uint32_t context = 0;
  std::uint32_t stream = 0;
  std::uint32_t stack = no_index;  // with_stack: the call's stack in the store's stacks()
  // The CUDA event (its handle; 0: none) an event sync or a stream's wait
  // waits for, or, with records_event, that the call records on `stream`.
  std::uint64_t event = 0;
  bool records_event = false;
};

// The int16 of a CUDA call's return value (api_call::return_value).
inline std::int16_t narrow_return_value(std::int32_t v) {
  return std::int16_t(std::clamp<std::int32_t>(v, INT16_MIN, INT16_MAX));
}

// Resolves an API callback id to its raw CUPTI name ("cudaLaunchKernel_v7000").
using api_name_lookup = std::function<std::string(api_domain, std::uint32_t cbid)>;

// A call kind with its name in the store's table, and whether its calls
// make GPU work the window waits for (launches, copies, memsets).
struct staged_kind {
  call_kind kind;
  bool expects_gpu_record = false;
  gpu_kind work = gpu_kind::kernel;  // the GPU work it makes, as window_edges counts it
};

// The kinds staged calls refer to (staged_call::kind), each decided once per
// callback id from its name (classify_api).
class call_kinds {
 public:
  explicit call_kinds(api_name_lookup lookup) : lookup_(std::move(lookup)) {}

  // The index of a call's kind, its name interned in `names`, or no_index when
  // the call is dropped as noise. Callback ids are below 2^16 (CUPTI's are below 2^11).
  std::uint32_t index(api_domain domain, std::uint32_t cbid, string_table& names) {
    auto& cache = domain == api_domain::runtime ? runtime_ : driver_;
    if (cbid > 0xFFFF) return no_index;
    if (cbid >= cache.size()) cache.resize(std::size_t(cbid) + 1);
    cached_api& entry = cache[cbid];
    if (!entry.known) {
      std::string raw = lookup_ ? lookup_(domain, cbid) : std::string();
      if (raw.empty()) raw = "cbid " + std::to_string(cbid);
      const std::string_view shown = api_base_name(raw);
      const api_class c = classify_api(domain, shown);
      if (c.display_name) {
        entry.kind = std::uint32_t(kinds_.size());
        kinds_.push_back({{names.intern(shown), std::uint16_t(cbid), domain, c.has_flow}, c.expects_gpu_record, c.work});
      }
      entry.known = true;
    }
    return entry.kind;
  }

  const staged_kind& operator[](std::size_t i) const { return kinds_[i]; }
  std::size_t size() const noexcept { return kinds_.size(); }

 private:
  struct cached_api {
    std::uint32_t kind = no_index;
    bool known = false;
  };

  api_name_lookup lookup_;
  std::vector<staged_kind> kinds_;
  std::vector<cached_api> runtime_, driver_;  // by callback id
};

// A staged API call: the fields of the api_call it becomes, times in ticks,
// kind an index into call_kinds (32 bytes, as the api_call).
struct staged_call : call_fields {
  // A driver call folded into this one on arrival: its correlation id minus
  // this one's (0: none, or one that does not fit, kept in the store's list).
  // In the padding: a launch stages no pair of ids for its folded driver call.
  std::int16_t folded_offset = 0;
  api_domain domain = api_domain::runtime;  // its kind's, at hand for the sort and the fold
  std::uint32_t folded_correlation() const { return std::uint32_t(std::int64_t(correlation) + folded_offset); }
};
static_assert(sizeof(staged_call) <= 32, "staged calls grew: recording holds more per launch");

inline bool folds_into(const staged_call& outer, const staged_call& inner) {
  return outer.domain == api_domain::runtime && inner.domain == api_domain::driver && outer.tid == inner.tid &&
         inner.start_ns >= outer.start_ns && inner.end_ns <= outer.end_ns;
}

// (driver call, runtime call it is inside) for the folds a staged call's
// folded_offset does not hold.
using folded_calls = std::vector<std::pair<std::uint32_t, std::uint32_t>>;

struct staged_calls {
  chunked_vector<staged_call> calls;  // in arrival order
  folded_calls folded;

  // Stages `c`, folded into the call before it or folding the calls before
  // it into itself, whichever of the two records comes first: one staged call
  // per launch instead of two. select_window_calls() (window_selection.hpp)
  // folds what this misses (records of other threads in between).
  void add(staged_call c) {
    if (!calls.empty() && folds_into(calls.back(), c)) return fold(calls.back(), c.correlation);
    while (!calls.empty() && folds_into(c, calls.back())) {
      fold(c, calls.back().correlation);
      calls.pop_back();
    }
    calls.push_back(c);
  }

  // The folds into calls up to `newest_taken` are no longer needed: a call
  // whose API record has not arrived yet is newer than any taken call.
  void forget_folds_through(std::uint32_t newest_taken) {
    folded_calls later;
    for (const auto& f : folded)
      if (f.second > newest_taken) later.push_back(f);
    folded.swap(later);
  }

 private:
  void fold(staged_call& outer, std::uint32_t inner) {
    if (inner == outer.correlation) return;  // the nested call shares the outer's id: nothing to map
    const std::int64_t offset = std::int64_t(inner) - std::int64_t(outer.correlation);
    if (outer.folded_offset == 0 && offset != 0 && offset >= INT16_MIN && offset <= INT16_MAX)
      outer.folded_offset = std::int16_t(offset);
    else folded.emplace_back(inner, outer.correlation);
  }
};

}  // namespace cuprof::detail::cupti
