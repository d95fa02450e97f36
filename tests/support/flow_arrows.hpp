// The ac2g arrows of a Chrome trace as the tests read them, in both encodings
// (docs/trace-format.md#flows):
//   flow v2: "bind_id" with "flow_out":true on the call's X event and
//            "flow_in":true on the GPU record's X event (the writer's, for a
//            call's first GPU record);
//   flow v1: an "s" event at the call's start and an "f" event ("bp":"e") at
//            the GPU record's start, same id, cat and name (the writer's for a
//            call's further records; older cuprof traces and Kineto's for all).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <vector>

namespace flow_test {

using json = nlohmann::json;

struct arrow {
  bool v2;
  std::uint64_t id;  // the bind_id, or the v1 id
  const json* from;  // v2: the call's X event; v1: the "s" event (at the call's start, on its lane)
  const json* to;    // v2: the GPU record's X event; v1: the "f" event (at the record's start, on its lane)
};

// Every arrow whose two ends are in the document (an end without the other is left out).
struct arrows {
  std::vector<arrow> all;
  std::size_t v1 = 0, v2 = 0;

  explicit arrows(const json& events) {
    std::map<std::uint64_t, const json*> s_by_id, outs;
    for (const json& e : events) {
      if (e.value("ph", "") == "s") s_by_id.emplace(e["id"].get<std::uint64_t>(), &e);
      if (e.value("flow_out", false) && e.contains("bind_id")) outs.emplace(e["bind_id"].get<std::uint64_t>(), &e);
    }
    for (const json& e : events) {
      if (e.value("ph", "") == "f") {
        const auto s = s_by_id.find(e["id"].get<std::uint64_t>());
        if (s != s_by_id.end()) all.push_back({false, s->first, s->second, &e}), ++v1;
      }
      if (e.value("flow_in", false) && e.contains("bind_id")) {
        const auto o = outs.find(e["bind_id"].get<std::uint64_t>());
        if (o != outs.end()) all.push_back({true, o->first, o->second, &e}), ++v2;
      }
    }
  }

  // The arrow into a GPU record's X event, or null: v2 ends on the event
  // itself, a v1 "f" at its start on its lane.
  const arrow* into(const json& gpu_event) const {
    for (const arrow& a : all)
      if (a.v2 ? a.to == &gpu_event
               : (*a.to)["pid"] == gpu_event["pid"] && (*a.to)["tid"] == gpu_event["tid"] && (*a.to)["ts"] == gpu_event["ts"])
        return &a;
    return nullptr;
  }

  // The arrows out of the call with this correlation id (its X event's args.correlation).
  std::vector<const arrow*> out_of(const json& events, std::uint64_t correlation) const {
    const json* call = nullptr;
    for (const json& e : events)
      if (e.value("ph", "") == "X" && (e.value("cat", "") == "cuda_runtime" || e.value("cat", "") == "cuda_driver") &&
          e["args"].value("correlation", std::uint64_t(0)) == correlation)
        call = &e;
    std::vector<const arrow*> out;
    if (!call) return out;
    for (const arrow& a : all)
      if (a.v2 ? a.from == call
               : (*a.from)["pid"] == (*call)["pid"] && (*a.from)["tid"] == (*call)["tid"] && (*a.from)["ts"] == (*call)["ts"])
        out.push_back(&a);
    return out;
  }
};

}  // namespace flow_test
