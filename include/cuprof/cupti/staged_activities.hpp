// What CUPTI's activity records become until a window takes them: compact
// copies of the trace's structs with times still in ticks, and the tables
// they refer to by index, kept across windows, so that each distinct name,
// form (name, kind, subkind), lane and kernel configuration is held once
// however many records use it. activity_converter.hpp fills it from CUPTI's
// structs, the record store (record_store.hpp) with its calls' sync records;
// nothing here needs CUPTI.
#pragma once

#include "../base/chunked_vector.hpp"
#include "../model/event.hpp"
#include "../model/memory_ledger.hpp"
#include "../model/string_table.hpp"

#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <utility>
#include <vector>

namespace cuprof::detail::cupti {

// What a GPU record is, with its name in the names table.
struct gpu_form {
  name_id name = 0;
  gpu_kind kind = gpu_kind::kernel;
  std::uint8_t subkind = 0;
  bool timing_unknown = false;  // CUPTI gave no valid times: placed when taken (gpu_timing_unknown)
};

// A staged GPU record: a gpu_activity less the fields attribution fills,
// times in ticks, what it is and where it ran as indices into the tables
// (32 bytes, against 40).
struct staged_gpu {
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = 0;
  std::uint32_t correlation = 0;
  std::uint32_t lane = 0;            // index into lanes()
  std::uint32_t form = 0;            // index into the forms: name, kind, subkind
  std::uint32_t details = no_index;  // kernels: index into kernel_configs(); copies and memsets: into
                                     // `bytes`; event syncs and waits: into `waited_events`
};
static_assert(sizeof(staged_gpu) <= 32, "staged GPU records grew: recording holds more per launch");

class staged_activities {
 public:
  static constexpr std::uint32_t unknown_device = no_index;  // a sync's lane until its context's device is known

  // The records, in arrival order, until a window takes them.
  chunked_vector<staged_gpu> gpu;
  chunked_vector<std::uint64_t> bytes;          // the staged copies' and memsets' byte counts
  chunked_vector<std::uint64_t> waited_events;  // the staged event syncs' and waits' event handles
  std::vector<overhead_span> overhead;          // ticks, names' ids
  std::vector<cpu_span> nvtx_ranges;            // ticks, names' ids
  std::vector<staged_memory> memory;            // allocations, frees, pool changes

  string_table names;  // every staged name, the calls' kinds' too

  std::size_t size() const noexcept { return gpu.size() + overhead.size() + nvtx_ranges.size() + memory.size(); }

  // The records; the tables stay, as do the ids that refer to them.
  void clear() {
    gpu.clear();
    bytes.clear();
    waited_events.clear();
    std::vector<overhead_span>().swap(overhead);
    std::vector<cpu_span>().swap(nvtx_ranges);
    std::vector<staged_memory>().swap(memory);
  }

  // A record's times, lane and correlation; `device` is unknown_device for a sync.
  staged_gpu gpu_record(std::uint64_t start, std::uint64_t end, std::uint32_t device, std::uint32_t context, std::uint32_t stream,
                        std::uint32_t correlation) {
    staged_gpu g;
    g.start_ns = start;
    g.end_ns = end;
    g.lane = lane_index({device, context, stream});
    g.correlation = correlation;
    if (device != unknown_device && (context != last_context_.first || device != last_context_.second)) {
      device_by_context_[context] = device;
      last_context_ = {context, device};
    }
    return g;
  }

  // A copy's or memset's byte count, staged beside it.
  void stage_bytes(staged_gpu& g, std::uint64_t count) {
    g.details = std::uint32_t(bytes.size());
    bytes.push_back(count);
  }

  // The CUDA event an event sync or a stream's wait waits for, staged beside it.
  void stage_wait(staged_gpu& g, std::uint64_t event) {
    g.details = std::uint32_t(waited_events.size());
    waited_events.push_back(event);
  }

  // The index of what a GPU record is; records come in runs of one.
  std::uint32_t form_index(name_id name, gpu_kind kind, std::uint8_t subkind, bool timing_unknown = false) {
    const std::uint64_t key =
        std::uint64_t(name) << 17 | std::uint64_t(timing_unknown) << 16 | std::uint64_t(kind) << 8 | subkind;
    if (last_form_.first == key) return last_form_.second;
    auto [it, added] = form_by_key_.try_emplace(key, std::uint32_t(forms_.size()));
    if (added) forms_.push_back({name, kind, subkind, timing_unknown});
    last_form_ = {key, it->second};
    return it->second;
  }

  // The index of a kernel's launch configuration in kernel_configs().
  std::uint32_t kernel_config_index(const kernel_details& d) {
    // Launches come in runs of one configuration: compare with the last before hashing.
    if (last_config_ != no_index && config_equal()(kernel_configs_[last_config_], d)) return last_config_;
    auto [it, inserted] = config_index_.try_emplace(d, std::uint32_t(kernel_configs_.size()));
    if (inserted) kernel_configs_.push_back(d);
    return last_config_ = it->second;
  }

  const gpu_form& form(const staged_gpu& g) const { return forms_[g.form]; }
  const std::vector<gpu_lane>& lanes() const noexcept { return lanes_; }
  const std::vector<kernel_details>& kernel_configs() const noexcept { return kernel_configs_; }
  bool moves_bytes(const staged_gpu& g) const { return cuprof::moves_bytes(form(g).kind); }
  bool waits_for_event(const staged_gpu& g) const { return form(g).kind == gpu_kind::sync && g.details != no_index; }

  // Sync records carry a context, not a device: the mapping is learnt from the
  // kernels and copies (one context per device in practice) and used when a
  // window is taken, as a sync may arrive before its context's first kernel.
  std::uint32_t device_of_context(std::uint32_t context) const {
    auto it = device_by_context_.find(context);
    return it == device_by_context_.end() ? 0 : it->second;
  }

 private:
  // The index of where a GPU record ran; records come in runs of one.
  std::uint32_t lane_index(const gpu_lane& l) {
    if (last_lane_.first == l) return last_lane_.second;
    auto [it, added] = lane_by_value_.try_emplace(l, std::uint32_t(lanes_.size()));
    if (added) lanes_.push_back(l);
    last_lane_ = {l, it->second};
    return it->second;
  }

  struct config_hash {
    std::size_t operator()(const kernel_details& d) const noexcept {
      std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
      const auto mix = [&](std::uint64_t v) { h = (h ^ v) * 1099511628211ull; };
      for (int i = 0; i < 3; ++i) mix(d.grid[i]), mix(d.block[i]);
      mix(d.registers_per_thread), mix(d.static_shared_memory), mix(d.dynamic_shared_memory);
      mix(d.graph_id), mix(d.graph_node_id);
      return std::size_t(h);
    }
  };
  struct config_equal {
    bool operator()(const kernel_details& a, const kernel_details& b) const noexcept {
      return std::memcmp(&a, &b, sizeof a) == 0;
    }
  };

  std::vector<gpu_form> forms_;  // what staged GPU records refer to by `form`
  std::unordered_map<std::uint64_t, std::uint32_t> form_by_key_;
  std::pair<std::uint64_t, std::uint32_t> last_form_{~std::uint64_t(0), 0};
  std::vector<gpu_lane> lanes_;  // what staged GPU records refer to by `lane`
  std::unordered_map<gpu_lane, std::uint32_t, gpu_lane_hash> lane_by_value_;
  std::pair<gpu_lane, std::uint32_t> last_lane_{{no_index, no_index, no_index}, no_index};
  std::unordered_map<kernel_details, std::uint32_t, config_hash, config_equal> config_index_;
  std::vector<kernel_details> kernel_configs_;
  std::uint32_t last_config_ = no_index;
  std::unordered_map<std::uint32_t, std::uint32_t> device_by_context_;
  std::pair<std::uint32_t, std::uint32_t> last_context_{no_index, 0};  // the last pair written there
};

}  // namespace cuprof::detail::cupti
