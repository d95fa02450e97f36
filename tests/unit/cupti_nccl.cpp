// NCCL's collectives from synthetic NVTX callbacks (CUpti_NvtxData with
// extended payloads built from nvToolsExtPayload.h's types) through the NVTX
// recorder, the record store, attribution and the Chrome trace: the args on
// the NCCL range's span and on its kernel, the payloads that are ignored, the
// range hook; the distributed backend's decision table. The reader's side is
// analysis_nccl.cpp.

#include <cuprof/cuprof.hpp>
#include <cuprof/cupti/nvtx_recorder.hpp>
#include <cuprof/cupti/record_store.hpp>
#include <cuprof/cupti/tracer.hpp>

#include "support/files.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

using json = nlohmann::json;
using namespace cuprof_test;

namespace {

using cuprof::collective_call;
using cuprof::collective_dtype;
using cuprof::collective_kind;
using cuprof::detail::cupti::nvtx_recorder;
using cuprof::detail::cupti::record_store;

// The process's one recorder (threads keep their buffers in a thread_local).
nvtx_recorder& process_nvtx_recorder() {
  static auto* r = new nvtx_recorder;
  return *r;
}

std::string no_name(cuprof::api_domain, std::uint32_t cbid) { return cbid == 211 ? "cudaLaunchKernel_v7000" : ""; }

template <class T>
T zeroed(CUpti_ActivityKind kind) {
  T r;
  std::memset(static_cast<void*>(&r), 0, sizeof r);
  r.kind = kind;
  return r;
}

// NVTX's calls as CUPTI hands them to the callback: params, return value.
struct nvtx_driver {
  nvtx_recorder& r = process_nvtx_recorder();
  bool recording = true;

  nvtxDomainHandle_t create_domain(const char* name, std::uintptr_t handle) {
    nvtxDomainCreateA_params p{name};
    auto h = reinterpret_cast<nvtxDomainHandle_t>(handle);
    call(CUPTI_CBID_NVTX_nvtxDomainCreateA, &p, &h);
    return h;
  }
  nvtxStringHandle_t register_string(nvtxDomainHandle_t d, const char* text, std::uintptr_t handle) {
    nvtxDomainRegisterStringA_params p{d, text};
    auto h = reinterpret_cast<nvtxStringHandle_t>(handle);
    call(CUPTI_CBID_NVTX_nvtxDomainRegisterStringA, &p, &h);
    return h;
  }
  // nvtxDomainRangePushEx with one EXT payload entry, as NCCL's NVTX3_FUNC_WITH_PARAMS makes it.
  template <class Payload>
  void push(nvtxDomainHandle_t d, nvtxStringHandle_t message, const Payload& payload, std::uint64_t schema,
            std::size_t size = sizeof(Payload)) {
    nvtxPayloadData_t entry{schema, size, &payload};
    nvtxEventAttributes_t a{};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.payloadType = NVTX_PAYLOAD_TYPE_EXT;
    a.reserved0 = 1;
    a.payload.ullValue = reinterpret_cast<std::uintptr_t>(&entry);
    a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    a.message.registered = message;
    nvtxDomainRangePushEx_params p{d, {&a}};
    call(CUPTI_CBID_NVTX_nvtxDomainRangePushEx, &p, nullptr);
  }
  void push_ascii(nvtxDomainHandle_t d, const char* text) {
    nvtxEventAttributes_t a{};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = text;
    nvtxDomainRangePushEx_params p{d, {&a}};
    call(CUPTI_CBID_NVTX_nvtxDomainRangePushEx, &p, nullptr);
  }
  void call(CUpti_CallbackId cbid, const void* params, const void* result) {
    CUpti_NvtxData d{};
    d.functionName = "nvtx";
    d.functionParams = params;
    d.functionReturnValue = result;
    r.on_nvtx(cbid, d, recording);
  }
};

// NCCL's payload structs (its src/include/nvtx_payload_schemas.h), by layout.
struct all_reduce_payload {
  std::uint64_t comm;
  std::size_t bytes;
  int op;
};
struct all_gather_payload {
  std::uint64_t comm;
  std::size_t bytes;
};
struct send_payload {
  std::uint64_t comm;
  std::size_t bytes;
  int peer;
};
struct comm_init_payload {
  std::uint64_t comm;
  int nranks, myrank, cuda_dev;
};
constexpr std::uint64_t schema_base = NVTX_PAYLOAD_SCHEMA_ID_STATIC_START;

void marker(record_store& s, std::uint32_t id, const char* name, const char* domain, std::uint64_t ts, bool start) {
  auto m = zeroed<CUpti_ActivityMarker2>(CUPTI_ACTIVITY_KIND_MARKER);
  m.flags = start ? CUPTI_ACTIVITY_FLAG_MARKER_START : CUPTI_ACTIVITY_FLAG_MARKER_END;
  m.timestamp = ts;
  m.id = id;
  m.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
  m.objectId.pt.threadId = cuprof::detail::current_tid();
  m.name = start ? name : nullptr;
  m.domain = domain;
  s.add(reinterpret_cast<const CUpti_Activity*>(&m));
}

void launch(record_store& s, const char* kernel, std::uint64_t at, std::uint32_t corr) {
  cuprof::detail::cupti::call_record c;
  c.start = at;
  c.end = at + 10;
  c.tid = cuprof::detail::current_tid();
  c.cbid = 211;
  c.correlation = corr;
  s.add_call(c);
  auto k = zeroed<CUpti_ActivityKernel10>(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  k.start = at + 5000;
  k.end = at + 9000;
  k.contextId = 1;
  k.streamId = 13;
  k.correlationId = corr;
  k.name = kernel;
  k.gridX = k.gridY = k.gridZ = k.blockX = k.blockY = k.blockZ = 1;
  s.add(reinterpret_cast<const CUpti_Activity*>(&k));
}

const json* event_named(const json& doc, const std::string& cat, const std::string& name) {
  for (const json& e : doc["traceEvents"])
    if (e.value("cat", "") == cat && e.value("name", "") == name) return &e;
  return nullptr;
}

// What the hook saw, one line per event: its kind, then the message, domain and id where it has them.
std::vector<std::string>& hooked() {
  static std::vector<std::string> seen;
  return seen;
}
void hook(const cuprof::detail::nvtx_range_event& e) {
  using ev = cuprof::detail::nvtx_range_event;
  static const char* const kinds[] = {"push", "start", "pop", "end", "domain"};
  std::string line = kinds[e.kind];
  if (e.message) line += " " + std::string(e.message, e.length);
  if (e.domain) line += " @" + std::to_string(e.domain);
  if (e.id) line += " #" + std::to_string(e.id);
  if (e.kind == ev::pop || e.kind == ev::end) CHECK(e.message == nullptr);
  hooked().push_back(line);
}

}  // namespace

TEST_SUITE("cupti") {

TEST_CASE("NCCL collectives: payloads become args on their NVTX range and on their kernels in the trace") {
  nvtx_driver nvtx;
  record_store store(no_name);
  const std::uint64_t undecoded_before = nvtx.r.undecoded();
  const auto nccl = nvtx.create_domain("NCCL", 0x1000);
  const auto other = nvtx.create_domain("torch", 0x1100);
  const auto all_reduce = nvtx.register_string(nccl, "ncclAllReduce", 0x2000);
  const auto all_gather = nvtx.register_string(nccl, "ncclAllGather", 0x2010);
  const auto send = nvtx.register_string(nccl, "ncclSend", 0x2020);
  const auto init = nvtx.register_string(nccl, "ncclCommInitRank", 0x2030);
  const auto foreign = nvtx.register_string(other, "ncclAllReduce", 0x2040);  // another domain's string
  CHECK(nvtx.r.nccl_seen());

  // Communicator creation is learnt also while no window records.
  nvtx.recording = false;
  nvtx.push(nccl, init, comm_init_payload{0xc0ffee, 2, 1, 1}, schema_base + 1);
  std::int32_t size = 0, rank = -1;
  REQUIRE(nvtx.r.communicator(0xc0ffee, size, rank));
  CHECK(size == 2);
  CHECK(rank == 1);
  nvtx.recording = true;
  nvtx.r.start_recording(0);

  std::map<std::string, std::uint64_t> at;  // each call's push, in ticks
  const auto timed = [&](const std::string& what, auto&& push) {
    at[what] = cuprof::detail::now_ticks();
    push();
  };
  timed("allreduce", [&] { nvtx.push(nccl, all_reduce, all_reduce_payload{0xc0ffee, 4096, 0}, schema_base + 7); });
  timed("allgather", [&] { nvtx.push(nccl, all_gather, all_gather_payload{0xc0ffee, 1024}, schema_base + 6); });
  timed("send", [&] { nvtx.push(nccl, send, send_payload{0xc0ffee, 64, 0}, schema_base + 11); });
  // Ignored: a payload of a size no layout has (counted), and another domain's EXT payload.
  nvtx.push(nccl, all_reduce, std::uint64_t(0xc0ffee), schema_base + 7);
  nvtx.push(other, foreign, all_reduce_payload{0xbad, 8, 0}, schema_base + 7);
  nvtx.r.drain_into(store);
  CHECK(nvtx.r.undecoded() == undecoded_before + 1);

  // The ranges' times and names, as CUPTI's MARKER records give them (each ends before the
  // next push), and the launches.
  marker(store, 1, "ncclAllReduce", "NCCL", at["allreduce"], true);
  launch(store, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", at["allreduce"] + 1, 1);
  marker(store, 1, nullptr, "NCCL", at["allgather"] - 1, false);
  marker(store, 2, "ncclAllGather", "NCCL", at["allgather"], true);
  marker(store, 2, nullptr, "NCCL", at["send"] - 1, false);
  marker(store, 3, "ncclSend", "NCCL", at["send"], true);
  marker(store, 3, nullptr, "NCCL", at["send"] + 1000, false);
  // AllGather's kernel is launched after its range and the next, as at a group's end.
  launch(store, "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", at["send"] + 2000, 2);

  cuprof::trace t;
  store.take(t, 0, std::uint64_t(1) << 62, cuprof::detail::tick_converter{});
  cuprof::link_spans(t);
  cuprof::attribute(t);
  REQUIRE(t.collectives.size() == 3);
  for (const collective_call& c : t.collectives) CHECK(c.span != cuprof::no_index);
  const collective_call& ar = t.collectives[0];
  CHECK(ar.kind == collective_kind::all_reduce);
  CHECK(ar.dtype == collective_dtype::float32);
  CHECK(ar.group_size == 2);

  t.meta.distributed_backend = "nccl";
  t.meta.nccl_version = "2.21.5";
  t.meta.communicator_count = 1;
  temp_dir dir;
  const std::string path = dir.file("nccl.json");
  cuprof::export_chrome_trace(t, path);
  const json doc = json::parse(slurp(path));
  CHECK(doc["distributedInfo"]["backend"] == "nccl");
  CHECK(doc["distributedInfo"]["nccl_version"] == "2.21.5");
  CHECK(doc["distributedInfo"]["pg_count"] == 1);

  const json* span = event_named(doc, "user_annotation", "ncclAllReduce");
  REQUIRE(span);
  const json& a = (*span)["args"];
  CHECK(a["Collective name"] == "allreduce");
  CHECK(a["dtype"] == "Float");
  CHECK(a["In msg nelems"] == 1024);
  CHECK(a["Out msg nelems"] == 1024);
  CHECK(a["Group size"] == 2);
  CHECK(a["Rank"] == 1);
  CHECK(a["Process Group Name"] == "0xc0ffee");
  CHECK(a["bytes"] == 4096);
  CHECK(a["Reduction op"] == "sum");
  const json* k = event_named(doc, "kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)");
  REQUIRE(k);
  CHECK((*k)["args"]["Collective name"] == "allreduce");
  CHECK((*k)["args"]["In msg nelems"] == 1024);
  CHECK((*k)["args"]["bytes"] == 4096);

  // AllGather's kernel names no type: no element counts, the rest is there.
  const json* gather = event_named(doc, "kernel", "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)");
  REQUIRE(gather);
  CHECK((*gather)["args"]["Collective name"] == "allgather");
  CHECK((*gather)["args"]["bytes"] == 1024);
  CHECK(!(*gather)["args"].contains("In msg nelems"));
  CHECK((*gather)["args"]["Not known"] == "dtype, In msg nelems, Out msg nelems");
  CHECK((*gather)["args"]["Group size"] == 2);
  CHECK(!a.contains("Not known"));  // the all-reduce's are all there
  const json* sent = event_named(doc, "user_annotation", "ncclSend");
  REQUIRE(sent);
  CHECK((*sent)["args"]["Collective name"] == "send");
  CHECK((*sent)["args"]["Peer"] == 0);
  CHECK((*sent)["args"]["bytes"] == 64);
}

TEST_CASE(
    "NCCL collectives: with NCCL's domain known, other domains' payloads are not NCCL's; a call's function decided by its name") {
  nvtx_driver nvtx;
  record_store store(no_name);
  nvtx.r.start_recording(0);
  nvtx.create_domain("NCCL", 0x1000);
  const auto unseen = reinterpret_cast<nvtxDomainHandle_t>(0x5000);  // never created while watched
  const std::uint64_t before = cuprof::detail::now_ticks();
  nvtx.push(unseen, reinterpret_cast<nvtxStringHandle_t>(0x6000), all_reduce_payload{0x77, 256, 2}, schema_base + 3);
  nvtx.r.drain_into(store);
  cuprof::trace t;
  marker(store, 9, "ncclAllReduce", "NCCL", before, true);
  marker(store, 9, nullptr, "NCCL", before + 100000, false);
  store.take(t, 0, std::uint64_t(1) << 62, cuprof::detail::tick_converter{});
  CHECK(t.collectives.empty());

  // Decided later from the range's name: a call recorded with its function unknown.
  collective_call c;
  // Zeroed whole: a call of unknown function keeps every byte, the padding after `op` too.
  all_reduce_payload p;
  std::memset(&p, 0, sizeof p);
  p.comm = 0x77;
  p.bytes = 256;
  p.op = 2;
  REQUIRE(cuprof::detail::decode_collective_payload(collective_kind::unknown, reinterpret_cast<const unsigned char*>(&p),
                                                    sizeof p, c));
  CHECK(c.kind == collective_kind::unknown);
  REQUIRE(cuprof::detail::resolve_collective(c, "ncclAllReduce"));
  CHECK(c.kind == collective_kind::all_reduce);
  CHECK(c.bytes == 256);
  CHECK(c.op == 2);
  CHECK(!cuprof::detail::resolve_collective(c, "torch.matmul"));
}

namespace {
// NCCL's nvtxRangePopPayload as NVTX calls it once the payload module is
// initialised: through the function the injection put in the module's slot.
struct payload_module {
  payload_module() = default;
  payload_module(const payload_module&) = delete;  // its pointers are to itself
  intptr_t slots[64] = {};
  nvtxExtModuleSegment_t segment{0, 63, slots};
  nvtxExtModuleInfo_t info{NVTX_VERSION, sizeof(nvtxExtModuleInfo_t), NVTX_EXT_PAYLOAD_MODULEID, 0x0103, 1, &segment, nullptr,
                           nullptr};
  using fn = int (*)(nvtxDomainHandle_t, const nvtxPayloadData_t*, std::size_t);
  template <class Payload>
  int pop(nvtxDomainHandle_t d, const Payload& payload, std::uint64_t schema) const {
    const nvtxPayloadData_t entry{schema, sizeof payload, &payload};
    return reinterpret_cast<fn>(slots[NVTX3EXT_CBID_nvtxRangePopPayload])(d, &entry, 1);
  }
};

struct comm_split_payload {
  std::uint64_t comm, parent;
  int nranks, myrank, cuda_dev, color, key;
};
}  // namespace

TEST_CASE(
    "NCCL 2.25 on: a communicator from its creation range's pop payload; collectives then name their group size, "
    "and what cannot be known") {
  nvtx_driver nvtx;
  record_store store(no_name);
  nvtx.r.start_recording(0);
  const auto nccl = nvtx.create_domain("NCCL", 0x1000);
  const auto init = nvtx.register_string(nccl, "ncclCommInitRankConfig", 0x2100);
  const auto reduce_scatter = nvtx.register_string(nccl, "ncclReduceScatter", 0x2110);
  const auto all_gather = nvtx.register_string(nccl, "ncclAllGather", 0x2120);

  // The injection serves push and pop in the payload module only; the module's other slots stay as NVTX left them.
  payload_module m;
  m.slots[NVTX3EXT_CBID_nvtxMarkPayload] = 1;  // NVTX_EXTENSION_DISABLED: left alone
  payload_module counters;
  counters.info.moduleId = 3;
  CHECK(!nvtx_recorder::install_payload_extension(counters.info));
  CHECK(counters.slots[NVTX3EXT_CBID_nvtxRangePopPayload] == 0);
  payload_module short_module;
  short_module.segment.slotCount = NVTX3EXT_CBID_nvtxRangePopPayload;  // no pop slot
  CHECK(!nvtx_recorder::install_payload_extension(short_module.info));
  CHECK(short_module.slots[NVTX3EXT_CBID_nvtxRangePushPayload] == 0);
  REQUIRE(nvtx_recorder::install_payload_extension(m.info));
  CHECK(m.slots[NVTX3EXT_CBID_nvtxRangePopPayload] > 4);  // a function, not one of NVTX's slot states
  CHECK(m.slots[NVTX3EXT_CBID_nvtxRangePushPayload] > 4);
  CHECK(m.slots[NVTX3EXT_CBID_nvtxMarkPayload] == 1);
  CHECK(m.slots[NVTX3EXT_CBID_nvtxPayloadSchemaRegister] == 0);

  // Not yet served (no tracer attached): nothing is learnt.
  CHECK(m.pop(nccl, comm_init_payload{0xaaa, 4, 3, 0}, schema_base + 11) == NVTX_NO_PUSH_POP_TRACKING);
  std::int32_t size = 0, rank = -1;
  CHECK(!nvtx.r.communicator(0xaaa, size, rank));

  const auto app = nvtx.create_domain("app", 0x1200);
  nvtx_recorder::serve(&nvtx.r);
  hooked().clear();
  cuprof::detail::process().on_nvtx_range.store(&hook, std::memory_order_relaxed);
  nvtx.push_ascii(nccl, "ncclCommInitRankConfig");  // NCCL's NVTX3_RANGE: a push without a payload
  m.pop(nccl, comm_init_payload{0xabc, 4, 3, 0}, schema_base + 11);
  REQUIRE(nvtx.r.communicator(0xabc, size, rank));
  CHECK(size == 4);
  CHECK(rank == 3);
  m.pop(nccl, comm_split_payload{0xdef, 0xabc, 2, 1, 0, 7, 0}, schema_base + 13);  // ncclCommSplit
  REQUIRE(nvtx.r.communicator(0xdef, size, rank));
  CHECK(size == 2);
  CHECK(rank == 1);
  // Abort's and revoke's payloads share the init layout; they create nothing. Another domain's neither.
  m.pop(nccl, comm_init_payload{0x111, 8, 0, 0}, schema_base + 3);
  m.pop(app, comm_init_payload{0x222, 8, 0, 0}, schema_base + 11);
  CHECK(!nvtx.r.communicator(0x111, size, rank));
  CHECK(!nvtx.r.communicator(0x222, size, rank));
  // nvtxRangePushPayload is a push for the hook, so that its pop does not end another range.
  const nvtxPayloadData_t entry{schema_base, 0, nullptr};
  reinterpret_cast<payload_module::fn>(m.slots[NVTX3EXT_CBID_nvtxRangePushPayload])(nccl, &entry, 1);
  cuprof::detail::process().on_nvtx_range.store(nullptr, std::memory_order_relaxed);
  const std::string at_nccl = " @" + std::to_string(0x1000);
  CHECK(hooked() == std::vector<std::string>{"push ncclCommInitRankConfig" + at_nccl, "pop" + at_nccl, "pop" + at_nccl,
                                             "pop" + at_nccl, "pop @" + std::to_string(0x1200), "push" + at_nccl});
  (void)init;

  // The collectives on that communicator: the group size and, with the kernel's type, the
  // reduce-scatter's element counts; the all-gather says what it cannot give.
  std::map<std::string, std::uint64_t> at;
  at["rs"] = cuprof::detail::now_ticks();
  nvtx.push(nccl, reduce_scatter, all_reduce_payload{0xabc, 4096, 0}, schema_base + 7);
  at["ag"] = cuprof::detail::now_ticks();
  nvtx.push(nccl, all_gather, all_gather_payload{0xabc, 2048}, schema_base + 4);
  nvtx.r.drain_into(store);
  marker(store, 21, "ncclReduceScatter", "NCCL", at["rs"], true);
  launch(store, "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", at["rs"] + 1, 21);
  marker(store, 21, nullptr, "NCCL", at["ag"] - 1, false);
  marker(store, 22, "ncclAllGather", "NCCL", at["ag"], true);
  launch(store, "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", at["ag"] + 1, 22);
  marker(store, 22, nullptr, "NCCL", at["ag"] + 100000, false);
  cuprof::trace t;
  store.take(t, 0, std::uint64_t(1) << 62, cuprof::detail::tick_converter{});
  cuprof::link_spans(t);
  cuprof::attribute(t);
  temp_dir dir;
  const std::string path = dir.file("nccl_groups.json");
  cuprof::export_chrome_trace(t, path);
  const json doc = json::parse(slurp(path));
  const json* rs = event_named(doc, "kernel", "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)");
  REQUIRE(rs);
  const json& r = (*rs)["args"];
  CHECK(r["Collective name"] == "reduce_scatter");
  CHECK(r["dtype"] == "Float");
  CHECK(r["In msg nelems"] == 4096);  // 1,024 floats received by each of 4 ranks
  CHECK(r["Out msg nelems"] == 1024);
  CHECK(r["Group size"] == 4);
  CHECK(r["Rank"] == 3);
  CHECK(!r.contains("Not known"));
  const json* ag = event_named(doc, "kernel", "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)");
  REQUIRE(ag);
  CHECK((*ag)["args"]["Group size"] == 4);
  CHECK((*ag)["args"]["bytes"] == 2048);
  CHECK((*ag)["args"]["Not known"] == "dtype, In msg nelems, Out msg nelems");
  CHECK(!(*ag)["args"].contains("dtype"));
  nvtx_recorder::serve(nullptr);
}

TEST_CASE("the range hook sees other domains' ranges by ASCII or registered message, not cuprof's") {
  nvtx_driver nvtx;
  const auto cuprof_domain = nvtx.create_domain("cuprof", 0x7000);
  const auto app = nvtx.create_domain("app", 0x7100);
  const auto step = nvtx.register_string(app, "ProfilerStep#3", 0x7200);
  hooked().clear();
  nvtx.push_ascii(app, "no hook yet");
  cuprof::detail::process().on_nvtx_range.store(&hook, std::memory_order_relaxed);
  nvtx.push_ascii(cuprof_domain, "a cuprof scope");
  nvtxDomainRangePop_params cuprof_pop{cuprof_domain};
  nvtx.call(CUPTI_CBID_NVTX_nvtxDomainRangePop, &cuprof_pop, nullptr);
  nvtx.push_ascii(app, "ProfilerStep#2");
  nvtx.push(app, step, all_gather_payload{0, 0}, schema_base);  // registered message (an EXT payload outside NCCL's domain)
  nvtxRangePushA_params plain{"plain push"};
  nvtx.call(CUPTI_CBID_NVTX_nvtxRangePushA, &plain, nullptr);
  nvtx.call(CUPTI_CBID_NVTX_nvtxRangePop, nullptr, nullptr);  // a pop takes no argument, with or without params
  int no_params = 0;
  nvtx.call(CUPTI_CBID_NVTX_nvtxRangePop, &no_params, nullptr);
  nvtxDomainRangePop_params app_pop{app};
  nvtx.call(CUPTI_CBID_NVTX_nvtxDomainRangePop, &app_pop, nullptr);
  // A started range hands over the id NVTX returned, and its end names it.
  nvtxRangeStartA_params started{"started"};
  nvtxRangeId_t id = 77;
  nvtx.call(CUPTI_CBID_NVTX_nvtxRangeStartA, &started, &id);
  nvtxRangeEnd_params ended{77};
  nvtx.call(CUPTI_CBID_NVTX_nvtxRangeEnd, &ended, nullptr);
  nvtxDomainRangeEnd_params domain_end{app, {78}};
  nvtx.call(CUPTI_CBID_NVTX_nvtxDomainRangeEnd, &domain_end, nullptr);
  nvtx.create_domain("capture", 0x7300);
  cuprof::detail::process().on_nvtx_range.store(nullptr, std::memory_order_relaxed);
  const std::string at_app = " @" + std::to_string(0x7100);
  CHECK(hooked() == std::vector<std::string>{"push ProfilerStep#2" + at_app, "push ProfilerStep#3" + at_app, "push plain push",
                                             "pop", "pop", "pop" + at_app, "start started #77", "end #77",
                                             "end" + at_app + " #78", "domain capture @" + std::to_string(0x7300)});
}

TEST_CASE("NCCL kernel names: element type and collective, new and old spellings") {
  using cuprof::detail::nccl_kernel_collective;
  using cuprof::detail::nccl_kernel_dtype;
  CHECK(nccl_kernel_dtype("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)") ==
        collective_dtype::float32);
  CHECK(nccl_kernel_dtype("ncclDevKernel_ReduceScatter_Sum_bf16_RING_SIMPLE") == collective_dtype::bfloat16);
  CHECK(nccl_kernel_dtype("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)") ==
        collective_dtype::float32);
  CHECK(nccl_kernel_dtype("ncclKernel_AllReduce_RING_LL_Sum___nv_bfloat16(ncclDevComm*)") == collective_dtype::bfloat16);
  CHECK(nccl_kernel_dtype("ncclKernel_Reduce_RING_LL_Max_int64_t(ncclDevComm*)") == collective_dtype::int64);
  CHECK(nccl_kernel_dtype("ncclDevKernel_AllGather_RING_LL") == collective_dtype::unknown);
  CHECK(nccl_kernel_dtype("gemm_f32_kernel") == collective_dtype::unknown);
  CHECK(nccl_kernel_collective("ncclDevKernel_AllReduce_Sum_f32_RING_LL") == collective_kind::all_reduce);
  CHECK(nccl_kernel_collective("ncclKernel_ReduceScatter_RING_LL_Sum_half") == collective_kind::reduce_scatter);
  CHECK(nccl_kernel_collective("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)") == collective_kind::send);
  // Elements as torch counts them: AllGather's out and ReduceScatter's in are the group's.
  collective_call g;
  g.kind = collective_kind::all_gather;
  g.bytes = 4096;
  g.dtype = collective_dtype::float16;
  g.group_size = 4;
  std::uint64_t in = 0, out = 0;
  REQUIRE(cuprof::detail::collective_elements(g, in, out));
  CHECK(in == 2048);
  CHECK(out == 8192);
  CHECK(cuprof::detail::communicator_name(0xc0ffee) == "0xc0ffee");
  CHECK(cuprof::detail::communicator_of_name("0xc0ffee") == 0xc0ffee);
}

TEST_CASE("distributedInfo's backend: what the process shows decides, in order nccl, mpi, gloo, none") {
  using env = std::map<std::string, std::string>;
  const auto decide = [](std::vector<std::string> libs, bool nccl_seen, env e) {
    return std::string(cuprof::detail::distributed_backend(libs, nccl_seen, [&](const char* n) {
      auto it = e.find(n);
      return it == e.end() ? static_cast<const char*>(nullptr) : it->second.c_str();
    }));
  };
  const std::string nccl = "/usr/lib/python3/site-packages/nvidia/nccl/lib/libnccl.so.2";
  const std::string mpi = "/usr/lib/x86_64-linux-gnu/libmpi.so.40";
  const env torchrun{{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"RANK", "0"}};
  const env mpirun{{"OMPI_COMM_WORLD_SIZE", "4"}};
  CHECK(decide({nccl}, false, torchrun) == "nccl");
  CHECK(decide({}, true, {}) == "nccl");  // a communicator seen, the library under another name
  CHECK(decide({mpi}, false, mpirun) == "mpi");
  CHECK(decide({mpi}, false, {{"PMI_SIZE", "2"}}) == "mpi");
  CHECK(decide({mpi}, false, {}) == "none");   // loaded, not launched by MPI
  CHECK(decide({}, false, mpirun) == "none");  // the launcher's variables, no MPI library
  CHECK(decide({"libtorch_cpu.so"}, false, torchrun) == "gloo");
  CHECK(decide({}, false, {{"WORLD_SIZE", "1"}, {"MASTER_ADDR", "x"}}) == "none");
  CHECK(decide({}, false, {{"WORLD_SIZE", "2"}}) == "none");
  CHECK(decide({"/opt/libncclx.so"}, false, {}) == "none");  // not libnccl
  CHECK(decide({nccl, mpi}, false, mpirun) == "nccl");
}

}  // TEST_SUITE("cupti")
