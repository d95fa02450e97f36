// Native call stacks at CUDA calls (profile_options::with_stack): the per-thread
// dedupe, the call recorder publishing stacks, the store linking and
// symbolizing them, the folded export, grouping by stack, the writer and the
// reader. CPU only: CUPTI's callbacks are made up.
#include <cuprof/analysis.hpp>
#include <cuprof/collect/native_stack.hpp>
#include <cuprof/collect/symbolizer.hpp>
#include <cuprof/cuprof.hpp>
#include <cuprof/cupti/call_recorder.hpp>
#include <cuprof/cupti/record_store.hpp>
#include <cuprof/output/folded_stacks.hpp>
#include <cuprof/output/stack_summary.hpp>

#include "support/files.hpp"
#include "support/traces.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {
using namespace cuprof_test;

using cuprof::api_domain;
using cuprof::no_index;
using cuprof::detail::symbolized_frame;
using cuprof::detail::thread_stacks;
using cuprof::detail::cupti::call_recorder;
using cuprof::detail::cupti::record_store;

std::string launch_names(api_domain d, std::uint32_t cbid) {
  if (d == api_domain::runtime && cbid == 211) return "cudaLaunchKernel_v7000";
  if (d == api_domain::runtime && cbid == 3) return "cudaGetDevice_v3020";
  if (d == api_domain::driver && cbid == 307) return "cuLaunchKernel";
  return {};
}

// CUPTI's callback at a call's entry and exit, with `inside` in between.
template <class Inside>
CUPROF_NOINLINE void callback(call_recorder& r, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, std::uint32_t correlation,
                              Inside&& inside) {
  std::uint64_t per_call = 0;
  std::int32_t result = 0;
  CUpti_CallbackData d;
  std::memset(static_cast<void*>(&d), 0, sizeof d);
  d.correlationData = &per_call;
  d.correlationId = correlation;
  d.functionReturnValue = &result;
  d.callbackSite = CUPTI_API_ENTER;
  r.on_call(domain, cbid, d);
  inside();
  d.callbackSite = CUPTI_API_EXIT;
  r.on_call(domain, cbid, d);
}
CUPROF_NOINLINE void launch_here(call_recorder& r, std::uint32_t correlation) {
  callback(r, CUPTI_CB_DOMAIN_RUNTIME_API, 211, correlation,
           [&] { callback(r, CUPTI_CB_DOMAIN_DRIVER_API, 307, correlation + 1, [] {}); });
}
CUPROF_NOINLINE void launch_there(call_recorder& r, std::uint32_t correlation) {
  callback(r, CUPTI_CB_DOMAIN_RUNTIME_API, 211, correlation, [] {});
}

// Each made-up address is a frame "f<address>"; addresses below 10 are the
// profiler's own (dropped at the top of a stack).
symbolized_frame fake_frame(std::uint64_t address) { return {"f" + std::to_string(address), address < 10}; }

std::vector<std::string> frames_of(const cuprof::trace& t, std::uint32_t stack) {
  std::vector<std::string> out;
  const cuprof::call_stack& s = t.stacks.at(stack);
  for (std::uint32_t k = 0; k < s.frame_count; ++k) out.push_back(t.names.str(t.stack_frames[s.first_frame + k]));
  return out;
}

// A recorder, its callbacks made on a thread of their own: each thread keeps
// its call buffer in a thread_local, registered with the first recorder it calls.
struct recorded {
  record_store store{launch_names};
  cuprof::trace t;

  template <class Calls>
  explicit recorded(bool stacks, Calls&& calls) {
    static auto* recorder = new call_recorder;  // never destroyed, as the tracer's
    recorder->set_stack_call(CUPTI_CB_DOMAIN_RUNTIME_API, 211);
    recorder->set_stack_call(CUPTI_CB_DOMAIN_DRIVER_API, 307);
    recorder->set_stacks(stacks);
    recorder->start_recording(cuprof::detail::now_ticks());
    std::thread([&] { calls(*recorder); }).join();
    recorder->drain_into(store);
    store.stacks().set_resolver([](std::uint64_t a) { return symbolized_frame{"0x" + std::to_string(a), false}; });
    store.take(t, 0, std::uint64_t(1) << 62, cuprof::detail::tick_converter{});
  }
};

}  // namespace

TEST_SUITE("call stacks") {
TEST_CASE("thread_stacks: a stack seen before has its id; a different one, or one of another depth, is new") {
  thread_stacks s;
  const std::uint64_t a[] = {1, 2, 3}, b[] = {1, 2, 4};
  const std::uint64_t ha = cuprof::detail::stack_hash(a, 3), hb = cuprof::detail::stack_hash(b, 3);
  CHECK(s.find(ha, a, 3) == thread_stacks::none);
  REQUIRE(s.add(ha, a, 3));
  CHECK(s.find(ha, a, 3) == 0);
  CHECK(s.find(hb, b, 3) == thread_stacks::none);
  CHECK(s.find(cuprof::detail::stack_hash(a, 2), a, 2) == thread_stacks::none);
  REQUIRE(s.add(hb, b, 3));
  CHECK(s.find(hb, b, 3) == 1);
  // Past its first table (64 slots, half full): every stack keeps its id.
  std::vector<std::uint64_t> many(200);
  for (std::uint64_t i = 0; i < 200; ++i) {
    many[i] = 1000 + i;
    REQUIRE(s.add(cuprof::detail::stack_hash(&many[i], 1), &many[i], 1));
  }
  for (std::uint64_t i = 0; i < 200; ++i) CHECK(s.find(cuprof::detail::stack_hash(&many[i], 1), &many[i], 1) == 2 + i);
  CHECK(s.find(ha, a, 3) == 0);
  s.clear();
  CHECK(s.count() == 0);
  CHECK(s.find(ha, a, 3) == thread_stacks::none);
}

TEST_CASE("call_recorder: one stack per call site, published once per thread; the nested driver call captures none") {
  recorded r(true, [](call_recorder& rec) {
    for (std::uint32_t i = 0; i < 5; ++i) launch_here(rec, 100 + 10 * i);
    launch_there(rec, 200);
  });
  // One stack published per call site, whatever the number of calls.
  CHECK(r.store.stacks().size() == 2);
  REQUIRE(r.t.api_calls.size() == 6);  // the driver calls folded into their runtime calls
  REQUIRE(r.t.call_stacks.size() == 6);
  const std::uint32_t here = r.t.call_stacks[0], there = r.t.call_stacks[5];
  REQUIRE(here != no_index);
  REQUIRE(there != no_index);
  CHECK(here != there);
  for (std::size_t i = 0; i < 5; ++i) CHECK(r.t.call_stacks[i] == here);
  CHECK(r.t.stacks.size() == 2);
  CHECK(frames_of(r.t, here).size() >= 3);  // the callback, launch_here, the thread's function, ...
}

TEST_CASE("call_recorder: with stacks off, no call has a stack and none is published") {
  recorded r(false, [](call_recorder& rec) { launch_here(rec, 300); });
  REQUIRE(r.t.api_calls.size() == 1);
  CHECK(r.store.stacks().size() == 0);
  CHECK(r.t.call_stacks.empty());
  CHECK(r.t.stacks.empty());
}

TEST_CASE("stack_store: the profiler's frames dropped from the top only; stacks that read the same are one") {
  record_store store(launch_names);
  store.stacks().set_resolver(fake_frame);
  cuprof::detail::cupti::stack_store& stacks = store.stacks();
  const std::uint64_t a[] = {1, 2, 100, 5, 200}, b[] = {3, 100, 5, 200}, c[] = {1, 2};
  const std::uint32_t sa = stacks.add(a, 5), sb = stacks.add(b, 4), sc = stacks.add(c, 2);
  CHECK(stacks.add(a, 5) == sa);  // merged across threads
  CHECK(sa != sb);
  cuprof::detail::cupti::call_record r;
  r.domain = api_domain::runtime;
  r.cbid = 211;
  const auto call = [&](std::uint64_t start, std::uint32_t correlation, std::uint32_t stack) {
    r.start = start;
    r.end = start + 10;
    r.correlation = correlation;
    r.stack = stack;
    store.add_call(r);
  };
  call(100, 1, sa);
  call(200, 2, sb);
  call(300, 3, sc);
  call(400, 4, no_index);
  call(5000, 5, sa);  // after the window
  cuprof::trace t;
  store.take(t, 0, 1000, cuprof::detail::tick_converter{});
  REQUIRE(t.api_calls.size() == 4);
  REQUIRE(t.call_stacks.size() == 4);
  CHECK(t.call_stacks[0] == t.call_stacks[1]);  // both read f100 < f5 < f200: the profiler's f5 kept below the top
  CHECK(frames_of(t, t.call_stacks[0]) == std::vector<std::string>{"f100", "f5", "f200"});
  CHECK(t.call_stacks[2] == no_index);  // nothing but the profiler's frames
  CHECK(t.call_stacks[3] == no_index);
  cuprof::trace later;
  store.take(later, 0, 10000, cuprof::detail::tick_converter{});
  REQUIRE(later.api_calls.size() == 1);
  REQUIRE(later.call_stacks.size() == 1);
  CHECK(frames_of(later, later.call_stacks[0]) == std::vector<std::string>{"f100", "f5", "f200"});
}

TEST_CASE("stack_store: warmup's discarded calls are not symbolized, and clear() forgets every stack") {
  record_store store(launch_names);
  int resolved = 0;
  store.stacks().set_resolver([&](std::uint64_t a) {
    ++resolved;
    return fake_frame(a);
  });
  const std::uint64_t a[] = {100, 200};
  cuprof::detail::cupti::call_record r;
  r.cbid = 211;
  r.start = 10, r.end = 20, r.correlation = 1, r.stack = store.stacks().add(a, 2);
  store.add_call(r);
  store.discard_before(1000);
  CHECK(resolved == 0);
  const std::uint64_t generation = store.stacks().generation();
  store.clear();
  CHECK(store.stacks().size() == 0);
  CHECK(store.stacks().generation() != generation);
}

namespace {
using namespace cuprof_test;
// A trace with two stacks: main > train > launch (two kernels), main > eval (a copy).
cuprof::trace stacked_trace() {
  builder b;
  b.call("cudaLaunchKernel", 1000, 1010, 1);
  b.call("cudaLaunchKernel", 2000, 2030, 2);
  b.call("cudaMemcpyAsync", 3000, 3100, 3);
  b.call("cudaGetDevice", 4000, 4001, 4, 1, api_domain::runtime, false);
  b.gpu("gemm", 10000, 13000, 1);
  b.gpu("gemm", 14000, 16600, 2);
  b.gpu("Memcpy HtoD", 17000, 17900, 3, cuprof::gpu_kind::memcpy);
  cuprof::trace& t = b.t;
  cuprof::detail::stack_interner stacks;
  const auto frames = [&](std::vector<std::string> names) {
    std::vector<cuprof::name_id> ids;
    for (const std::string& n : names) ids.push_back(t.names.intern(n));
    return ids;
  };
  const std::uint32_t train = stacks.add(t, frames({"launch (model.cpp:42)", "train (model.cpp:10)", "main (main.cpp:3)"}));
  const std::uint32_t eval = stacks.add(t, frames({"eval; \"odd\"\nname", "main (main.cpp:3)"}));
  cuprof::detail::stack_interner::set(t, 0, train);
  cuprof::detail::stack_interner::set(t, 1, train);
  cuprof::detail::stack_interner::set(t, 2, eval);
  cuprof::detail::stack_interner::finish(t);
  cuprof::attribute(t);
  return std::move(b.t);
}
}  // namespace

TEST_CASE("folded stacks: a line per stack, root first, GPU or CPU time in us; calls without a stack left out") {
  const cuprof::trace t = stacked_trace();
  CHECK(cuprof::folded_stacks(t, cuprof::stack_metric::self_cuda_time_total) ==
        "main (main.cpp:3);eval, \"odd\" name 1\n"
        "main (main.cpp:3);train (model.cpp:10);launch (model.cpp:42) 6\n");
  CHECK(cuprof::folded_stacks(t, cuprof::stack_metric::self_cpu_time_total).empty());  // 40 and 100 ns: 0 us, left out
  CHECK(cuprof::detail::parse_stack_metric("self_device_time_total") == cuprof::stack_metric::self_cuda_time_total);
  CHECK(cuprof::detail::parse_stack_metric("self_cpu_time_total") == cuprof::stack_metric::self_cpu_time_total);
  CHECK_THROWS_AS(cuprof::detail::parse_stack_metric("cpu_time"), cuprof::error);
}

TEST_CASE("key_averages(group_by_stack_n): rows per name and first frames, a left-aligned Source Location column") {
  const cuprof::trace t = stacked_trace();
  const cuprof::event_averages plain = cuprof::key_averages(t);
  CHECK(plain.table().find("Source Location") == std::string::npos);
  const cuprof::event_averages by1 = cuprof::key_averages(t, cuprof::group_by::name, 1);
  int launch_rows = 0, gemm_rows = 0;
  for (const cuprof::event_average& r : by1.rows()) {
    if (r.key == "cudaLaunchKernel") {
      ++launch_rows;
      CHECK(r.count == 2);
      CHECK(r.stack == std::vector<std::string>{"launch (model.cpp:42)"});
    }
    if (r.key == "gemm") {
      ++gemm_rows;
      CHECK(r.stack == std::vector<std::string>{"launch (model.cpp:42)"});  // its launching call's stack
      CHECK(r.self_cuda_ns == 5600);
    }
    if (r.key == "cudaGetDevice") CHECK(r.stack.empty());
  }
  CHECK(launch_rows == 1);
  CHECK(gemm_rows == 1);
  // Grouped by 1 frame, stacks that differ further down share a row; by 2, eval's and train's calls differ by name anyway.
  const std::string table = cuprof::key_averages(t, cuprof::group_by::name, 2).table();
  const std::size_t header = table.find("Source Location");
  REQUIRE(header != std::string::npos);
  std::istringstream lines(table);
  std::string line;
  bool second_frame = false;
  while (std::getline(lines, line)) {
    const std::size_t at = line.find("train (model.cpp:10)");
    if (at == std::string::npos) continue;
    second_frame = true;
    CHECK(line.find_first_not_of(' ') == at);  // a line of its own, its other cells blank
  }
  CHECK(second_frame);
  // Left-aligned: a row's first frame and its next frame, on the line below, start in one column.
  std::istringstream again(table);
  std::size_t first_at = std::string::npos, next_at = std::string::npos;
  while (std::getline(again, line)) {
    if (first_at == std::string::npos) first_at = line.find("launch (model.cpp:42)");
    if (next_at == std::string::npos) next_at = line.find("train (model.cpp:10)");
  }
  REQUIRE(first_at != std::string::npos);
  CHECK(first_at == next_at);
}

TEST_CASE("Source Location: at most 75 wide, a longer frame keeps its end behind \"...\"") {
  cuprof::trace t = stacked_trace();
  const std::string long_frame = "ns::" + std::string(100, 'x') + "::f (deep/path/file.cpp:7)";
  cuprof::detail::stack_interner stacks(t);
  const std::uint32_t s = stacks.add(t, {t.names.intern(long_frame)});
  t.call_stacks[3] = s;
  const std::string table = cuprof::key_averages(t, cuprof::group_by::name, 1).table();
  const std::size_t at = table.find("...");
  REQUIRE(at != std::string::npos);
  const std::string tail = table.substr(at, table.find('\n', at) - at);
  REQUIRE(tail.size() >= 75);
  CHECK(tail.compare(75 - 11, 11, "file.cpp:7)") == 0);  // "..." and the frame's last 72 characters
}

// A document's stack of `frame` (an "sf"), innermost first, through its stackFrames.
std::vector<std::string> stack_from_frames(const nlohmann::json& doc, const nlohmann::json& frame) {
  std::vector<std::string> out;
  for (std::string id = frame.dump(); out.size() < 100;) {
    const nlohmann::json& node = doc.at("stackFrames").at(id);
    out.push_back(node.at("name").get<std::string>());
    if (!node.contains("parent")) break;
    id = node["parent"].get<std::string>();
  }
  return out;
}

TEST_CASE("the trace keeps each stack once (stackFrames), each call its short form as an array arg; the reader reads it back") {
  cuprof::trace t = stacked_trace();
  t.meta.pid = 4242;  // a process as a real trace names it (Perfetto refuses an empty process name)
  t.meta.process_name = "app";
  const std::string json = cuprof::chrome_trace_json(t);
  keep_trace("writer_call_stacks.json", json);  // for the validator (rule 27) and the Perfetto check (Call stack shown)
  const nlohmann::json doc = nlohmann::json::parse(json);
  // Stacks {launch, train, main} and {eval..., main}: one node per frame and caller, main shared.
  REQUIRE(doc.contains("stackFrames"));
  CHECK(doc["stackFrames"].size() == 4);
  int with_stack = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e.value("cat", "") != "cuda_runtime") continue;
    if (!e["args"].contains("Call stack")) {
      CHECK_FALSE(e.contains("sf"));
      continue;
    }
    ++with_stack;
    REQUIRE(e.contains("sf"));
    const std::vector<std::string> whole = stack_from_frames(doc, e["sf"]);
    std::vector<std::string_view> views(whole.begin(), whole.end());
    CHECK(e["args"]["Call stack"] == nlohmann::json(cuprof::detail::stack_summary(views)));
    if (e["args"]["correlation"] == 3) CHECK(whole == std::vector<std::string>{"eval; \"odd\"\nname", "main (main.cpp:3)"});
    else CHECK(whole == std::vector<std::string>{"launch (model.cpp:42)", "train (model.cpp:10)", "main (main.cpp:3)"});
  }
  CHECK(with_stack == 3);
  const cuprof::loaded_trace back = cuprof::parse_trace(json, "stacks.json");
  const cuprof::trace& r = back.t;
  REQUIRE(r.call_stacks.size() == r.api_calls.size());
  REQUIRE(r.stacks.size() == 2);
  for (std::size_t i = 0; i < r.api_calls.size(); ++i) {
    const std::uint32_t c = r.api_calls[i].correlation;
    if (c == 4) CHECK(r.call_stacks[i] == no_index);
    if (c == 1 || c == 2)
      CHECK(frames_of(r, r.call_stacks[i]) ==
            std::vector<std::string>{"launch (model.cpp:42)", "train (model.cpp:10)", "main (main.cpp:3)"});
    if (c == 3) CHECK(frames_of(r, r.call_stacks[i]) == std::vector<std::string>{"eval; \"odd\"\nname", "main (main.cpp:3)"});
  }
  CHECK(cuprof::folded_stacks(r, cuprof::stack_metric::self_cuda_time_total) ==
        cuprof::folded_stacks(t, cuprof::stack_metric::self_cuda_time_total));
}

TEST_CASE("short_frame: the function's qualified name and its file:line, no return type, templates or parameters") {
  using cuprof::detail::short_frame;
  CHECK(short_frame("bool at::cuda::blas::gemm_and_bias<float, float>(bool, long, float const*) (Blas.cpp:42)") ==
        "at::cuda::blas::gemm_and_bias (Blas.cpp:42)");
  CHECK(short_frame("at::native::(anonymous namespace)::addmm_out_cuda_impl(at::Tensor&, c10::Scalar const&)") ==
        "at::native::(anonymous namespace)::addmm_out_cuda_impl");
  CHECK(short_frame("void at::native::foo<float>(float*) [clone .isra.0]") == "at::native::foo");
  CHECK(short_frame("at::native::fill_kernel_cuda(at::TensorIterator&)::{lambda()#1}::operator()() const") ==
        "at::native::fill_kernel_cuda::{lambda#1}::operator()");
  CHECK(short_frame("std::ostream& std::operator<< <char>(std::ostream&, char const*)") == "std::operator<<");
  CHECK(short_frame("Foo::operator->() const") == "Foo::operator->");
  CHECK(short_frame("libcublasLt.so.13+0x71b858b") == "libcublasLt.so.13+0x71b858b");
  CHECK(short_frame("_PyEval_EvalFrameDefault") == "_PyEval_EvalFrameDefault");
  CHECK(short_frame("launch (model.cpp:42)") == "launch (model.cpp:42)");
  CHECK(short_frame("gemm(cublasContext*, float const*) (/home/me/src/model.cu:36)") == "gemm (model.cu:36)");
  CHECK(short_frame("eval; \"odd\"\nname") == "eval; \"odd\"\nname");  // no parameters: no return type to drop
  // nvcc's launch stub, named by its kernel.
  CHECK(short_frame("__device_stub__Z5scalePfi(float*, int)") == "scale");
  CHECK(short_frame("") == "");
}

TEST_CASE("stack_summary: the innermost frames up to its budget, a library's unnamed run as one entry, the rest counted") {
  using cuprof::detail::stack_summary;
  const std::vector<std::string_view> frames = {"libcublasLt.so.13+0x1",
                                                "libcublasLt.so.13+0x2",
                                                "libcublasLt.so.13+0x3",
                                                "cublasLtMatmul",
                                                "void gemm<float>(int) (gemm.cpp:7)",
                                                "python3.12+0x14caec",
                                                "_PyEval_EvalFrameDefault",
                                                "main"};
  CHECK(stack_summary(frames) == std::vector<std::string>{"libcublasLt.so.13 (3 frames)", "cublasLtMatmul", "gemm (gemm.cpp:7)",
                                                          "python3.12+0x14caec", "_PyEval_EvalFrameDefault", "main"});
  CHECK(stack_summary(frames, 45) == std::vector<std::string>{"libcublasLt.so.13 (3 frames)", "cublasLtMatmul", "+4 frames"});
  // One entry at least, however long.
  const std::string long_frame(500, 'x');
  CHECK(stack_summary({long_frame, "main"}, 10) == std::vector<std::string>{long_frame, "+1 frames"});
  CHECK(stack_summary({}).empty());
}

TEST_CASE("with_stack's trace: each stack once, a short arg per call, a few hundred bytes a call rather than kilobytes") {
  // 4,000 launches with their kernels over 40 stacks of 46 frames, each frame as long as a PyTorch one.
  builder b;
  for (std::uint32_t i = 0; i < 4000; ++i) {
    const std::uint64_t at = 1000 + std::uint64_t(i) * 10000;
    b.call("cudaLaunchKernel", at, at + 10, 10 + i);
    b.gpu("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >",
          at + 5000, at + 8000, 10 + i);
  }
  cuprof::trace plain = b.t;
  cuprof::trace& t = b.t;
  cuprof::detail::stack_interner stacks;
  std::vector<std::uint32_t> ids;
  for (int s = 0; s < 40; ++s) {
    std::vector<cuprof::name_id> frames;
    for (int f = 0; f < 46; ++f)
      frames.push_back(t.names.intern(
          "at::native::op" + std::to_string(f < 6 ? s * 100 + f : f) +
          "<float, 4>(at::Tensor const&, at::Tensor&, c10::Scalar const&, long) (ops.cpp:" + std::to_string(f) + ")"));
    ids.push_back(stacks.add(t, frames));
  }
  for (std::size_t i = 0; i < t.api_calls.size(); ++i) cuprof::detail::stack_interner::set(t, i, ids[i % ids.size()]);
  cuprof::attribute(t);
  cuprof::attribute(plain);
  const std::string json = cuprof::chrome_trace_json(t);
  const std::size_t with = json.size(), without = cuprof::chrome_trace_json(plain).size();
  CAPTURE(with);
  CAPTURE(without);
  // Each call adds its short arg and its "sf" (about 240 bytes here), the stacks' nodes a few KB in all:
  // inline, each call would carry its 46 frames, over 4 KB. (A PyTorch loop's stacks trace: 1.31 times
  // its size without, docs/guide.md.)
  REQUIRE(with > without);
  CHECK((with - without) / t.api_calls.size() <= 300);
  // The whole stacks are all there: read back, each call has its 46 frames.
  const cuprof::loaded_trace back = cuprof::parse_trace(json, "many.json");
  REQUIRE(back.t.stacks.size() == 40);
  CHECK(frames_of(back.t, back.t.stack_of(back.t.api_calls.size() - 1)).size() == 46);
}

TEST_CASE(
    "hostile stackFrames: a loop, a missing caller, a node that is no frame, an odd sf: the call keeps its Call stack arg") {
  const auto read = [](const std::string& frames, const std::string& sf) {
    const std::string json =
        R"({"stackFrames":)" + frames +
        R"(,"traceEvents":[{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":1,"dur":2,"sf":)" + sf +
        R"(,"args":{"correlation":7,"Call stack":["short"]}}]})";
    const cuprof::loaded_trace back = cuprof::parse_trace(json, "hostile.json");
    REQUIRE(back.t.api_calls.size() == 1);
    return frames_of(back.t, back.t.stack_of(0));
  };
  const std::vector<std::string> arg = {"short"};
  CHECK(read(R"({"1":{"name":"a","parent":"2"},"2":{"name":"b","parent":"1"}})", "1") == arg);  // a loop
  CHECK(read(R"({"1":{"name":"a","parent":"9"}})", "1") == arg);                                // a caller not there
  CHECK(read(R"({"1":{"name":5}})", "1") == arg);
  CHECK(read(R"({"1":"a"})", "1") == arg);
  CHECK(read(R"({"x":{"name":"a"}})", "\"x\"") == arg);
  CHECK(read(R"({"1":{"name":"a"}})", "-1") == arg);
  CHECK(read(R"({"1":{"name":"a"}})", "99999999999999999999999") == arg);
  CHECK(read(R"([1,2])", "1") == arg);
  CHECK(read(R"({"1":{"name":"a"}})", "{}") == arg);
  // Ids as strings or numbers alike; parents too.
  CHECK(read(R"({"1":{"name":"main"},"2":{"name":"f","parent":1}})", "\"2\"") == std::vector<std::string>{"f", "main"});
  // A chain of 5,000 frames: its innermost 1,024.
  std::string chain = "{";
  for (int i = 1; i <= 5000; ++i)
    chain += (i > 1 ? "," : "") + std::string("\"") + std::to_string(i) + "\":{\"name\":\"f" + std::to_string(i) + "\"" +
             (i > 1 ? ",\"parent\":\"" + std::to_string(i - 1) + "\"" : "") + "}";
  chain += "}";
  const std::vector<std::string> deep = read(chain, "5000");
  REQUIRE(deep.size() == 1024);
  CHECK(deep.front() == "f5000");
  CHECK(deep.back() == "f3977");
}

TEST_CASE("a hostile Call stack arg gives the call no stack, and the rest of the trace reads") {
  for (const char* stack : {"\"main;f\"", "42", "{}", "[]", "[1, 2]", "[\"a\", null]", "[[\"a\"]]", "[\"a\", {\"b\": 1}]"}) {
    CAPTURE(stack);
    const std::string json =
        std::string(
            R"({"traceEvents":[{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":1,"dur":2,)") +
        R"("args":{"correlation":7,"Call stack":)" + stack + "}}]}";
    const cuprof::loaded_trace back = cuprof::parse_trace(json, "hostile.json");
    REQUIRE(back.t.api_calls.size() == 1);
    CHECK(back.t.stack_of(0) == no_index);
    CHECK(back.t.stacks.empty());
  }
  // Thousands of frames, escapes and non-ASCII: kept as written.
  std::string frames = "[";
  for (int i = 0; i < 5000; ++i) frames += std::string(i ? "," : "") + "\"f\\u00e9\\\"" + std::to_string(i) + "\"";
  frames += "]";
  const std::string json =
      std::string(R"({"traceEvents":[{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":1,"dur":2,)") +
      R"("args":{"correlation":7,"Call stack":)" + frames + "}}]}";
  const cuprof::loaded_trace back = cuprof::parse_trace(json, "deep.json");
  REQUIRE(back.t.stack_of(0) != no_index);
  const std::vector<std::string> read = frames_of(back.t, back.t.stack_of(0));
  REQUIRE(read.size() == 5000);
  CHECK(read[4999] == "f\xC3\xA9\"4999");
}

namespace {
using namespace cuprof_test;
volatile int after_call = 0;  // stores after the calls: no tail call takes a frame away
// The return address of a call: an address in its caller, whichever unwinder
// the stacks use (they differ in how many of their own frames they report).
CUPROF_NOINLINE std::uint64_t return_address() {
  const std::uint64_t address = reinterpret_cast<std::uint64_t>(__builtin_return_address(0));
  after_call = after_call + 1;
  return address;
}
// The line of the call whose return address symbolize() is given.
int symbolized_line = 0;
CUPROF_NOINLINE std::uint64_t return_address_in_here() {
  symbolized_line = __LINE__ + 1;
  const std::uint64_t address = return_address();
  after_call = after_call + 1;
  return address;
}
// A return address inside code inlined into a function: the frame is that
// function's, at the line where it called the inlined code (a <<<>>> launch
// inlines the kernel's host stub so).
[[gnu::always_inline]] inline std::uint64_t inlined_helper() {
  const std::uint64_t address = return_address();
  after_call = after_call + 1;
  return address;
}
int inlined_call_line = 0;
CUPROF_NOINLINE std::uint64_t calls_inlined_code() {
  inlined_call_line = __LINE__ + 1;
  const std::uint64_t address = inlined_helper();
  after_call = after_call + 1;
  return address;
}
}  // namespace

TEST_CASE("symbolizer: code inlined into a function resolves to the function, at the line that called it (libdw)") {
  const std::uint64_t address = calls_inlined_code();
  REQUIRE(address != 0);
  cuprof::detail::symbolizer s;
  if (!s.has_line_info()) {
    MESSAGE("libdw (libdw1) is not installed: file and line are not checked");
    return;
  }
  const symbolized_frame f = s.resolve(address);
  CAPTURE(f.text);
  CHECK(f.text.find("calls_inlined_code") != std::string::npos);
  CHECK(f.text.find("call_stacks.cpp:" + std::to_string(inlined_call_line) + ")") != std::string::npos);
}

TEST_CASE("symbolizer: a function of this test binary resolves to its name, file and line (libdw)") {
  const std::uint64_t address = return_address_in_here();
  REQUIRE(address != 0);
  cuprof::detail::symbolizer s;
  if (!s.has_line_info()) {
    MESSAGE("libdw (libdw1) is not installed: file and line are not checked");
    return;
  }
  const symbolized_frame f = s.resolve(address);
  CHECK(f.text.find("return_address_in_here") != std::string::npos);
  CHECK(f.text.find("call_stacks.cpp:" + std::to_string(symbolized_line) + ")") != std::string::npos);
  CHECK_FALSE(f.tool_frame);
}

TEST_CASE("symbolizer without libdw: exported names through dladdr, demangled; the profiler's modules are tool frames") {
  cuprof::detail::symbolizer s(false);
  CHECK_FALSE(s.has_line_info());
  const symbolized_frame f = s.resolve(reinterpret_cast<std::uint64_t>(&std::terminate) + 1);
  CHECK(f.text == "std::terminate()");
  CHECK(cuprof::detail::is_tool_module("/usr/local/cuda/lib64/libcudart.so.12"));
  CHECK(cuprof::detail::is_tool_module("libcupti.so.13"));
  CHECK(cuprof::detail::is_tool_module("/usr/lib/x86_64-linux-gnu/libcuda.so.1"));
  CHECK_FALSE(cuprof::detail::is_tool_module("/opt/lib/libcublasLt.so.12"));
  CHECK_FALSE(cuprof::detail::is_tool_module("libcudnn.so.9"));
  CHECK(cuprof::detail::is_tool_function("cuprof::detail::cupti::tracer::on_callback(void*, int, unsigned int, void const*)"));
  CHECK_FALSE(cuprof::detail::is_tool_function("my::cuprof::f()"));
}

TEST_CASE("profile::export_stacks refuses an unknown metric and writes the folded text") {
  cuprof::profile_options o = cpu_only();
  o.with_stack = true;
  cuprof::profile p(o, cuprof::start_now);
  p.stop();
  const temp_dir dir;
  const std::string path = (dir.path / "stacks.folded").string();
  CHECK_THROWS_AS(p.export_stacks(path, "count"), cuprof::error);
  p.export_stacks(path);  // a CPU-only profile has no stacks: an empty file
  std::ifstream in(path);
  REQUIRE(in.good());
  CHECK(std::string(std::istreambuf_iterator<char>(in), {}).empty());
}
}  // TEST_SUITE("call stacks")
