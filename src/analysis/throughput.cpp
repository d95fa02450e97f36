#include "text_format.hpp"

#include <cuprof/analysis.hpp>
#include <cuprof/model/attribution.hpp>

#include <cstdio>

namespace cuprof {

namespace {

// Dense FLOPs per SM per clock (an FMA counts 2), from NVIDIA's published
// peak figures divided by SMs x the clock the figure was stated at:
//   sm_80: A100 whitepaper (2020), 108 SMs at 1410 MHz: 312 TFLOP/s FP16/BF16
//          tensor, 156 TF32 tensor, 19.5 FP32 (non-tensor).
//   sm_86: GA102 whitepaper (2020): 128 FP32 cores per SM. Tensor rates differ
//          between GeForce and professional parts (half rate with FP32
//          accumulation on GeForce): left out.
//   sm_89: Ada (AD102) whitepaper (2022): 128 FP32 cores per SM; tensor rates
//          left out for the same reason.
//   sm_90: H100 whitepaper (2022), SXM5, 132 SMs at 1830 MHz: 989.4 TFLOP/s
//          FP16/BF16 tensor, 494.7 TF32 tensor; 128 FP32 cores per SM.
struct sm_flops_rate {
  int major, minor;
  const char* dtype;  // as kernel_name_info::a_type spells it
  double flops_per_sm_per_clock;
  const char* unit;  // what executes it
};
constexpr sm_flops_rate sm_flops_rates[] = {
    {8, 0, "bf16", 2048, "dense tensor"}, {8, 0, "fp16", 2048, "dense tensor"}, {8, 0, "tf32", 1024, "dense tensor"},
    {8, 0, "fp32", 128, "FP32 cores"},    {8, 6, "fp32", 256, "FP32 cores"},    {8, 9, "fp32", 256, "FP32 cores"},
    {9, 0, "bf16", 4096, "dense tensor"}, {9, 0, "fp16", 4096, "dense tensor"}, {9, 0, "tf32", 2048, "dense tensor"},
    {9, 0, "fp32", 256, "FP32 cores"},
};

// The integer argument `key` of span s, if it has one.
bool span_integer_arg(const trace& t, const cpu_span& s, std::string_view key, std::int64_t& out) {
  for (std::uint32_t i = s.first_arg; i < s.first_arg + s.arg_count; ++i) {
    const span_arg& a = t.span_args[i];
    if (a.kind == span_arg::type::integer && t.names.str(a.key) == key) {
      out = a.integer;
      return true;
    }
  }
  return false;
}

// 2*M*N*K(*batch) of the nearest scope enclosing the launch that has M, N and K; 0 if none.
double gemm_flops(const trace& t, const gpu_activity& g) {
  for (std::uint32_t s = launching_span(t, g); s != no_index; s = t.spans[s].parent) {
    std::int64_t m = 0, n = 0, k = 0, batch = 1;
    const cpu_span& sp = t.spans[s];
    if (span_integer_arg(t, sp, "M", m) && span_integer_arg(t, sp, "N", n) && span_integer_arg(t, sp, "K", k)) {
      span_integer_arg(t, sp, "batch", batch);
      if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return 0;
      return 2.0 * double(m) * double(n) * double(k) * double(batch);
    }
  }
  return 0;
}

}  // namespace

peak_rate peak_flops(const device_info* d, std::string_view dtype) {
  if (!d) return {0, "unknown peak: the trace has no deviceProperties for the device"};
  const std::string arch = "sm_" + std::to_string(d->compute_major) + std::to_string(d->compute_minor);
  if (dtype.empty()) return {0, "unknown peak: the kernel's name gives no operand type"};
  const sm_flops_rate* rate = nullptr;
  for (const sm_flops_rate& r : sm_flops_rates)
    if (r.major == d->compute_major && r.minor == d->compute_minor && dtype == r.dtype) rate = &r;
  if (!rate) return {0, "unknown peak: no figure for " + std::string(dtype) + " on " + arch};
  if (d->num_sms <= 0 || d->clock_rate_khz <= 0)
    return {0, "unknown peak: the trace's deviceProperties have no numSms or clockRate"};
  peak_rate p;
  p.value = rate->flops_per_sm_per_clock * d->num_sms * double(d->clock_rate_khz) * 1e3;
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s %s %s: %g FLOP/clock/SM x %d SMs x %.3f GHz = ", arch.c_str(), std::string(dtype).c_str(),
                rate->unit, rate->flops_per_sm_per_clock, d->num_sms, double(d->clock_rate_khz) / 1e6);
  p.basis = buf + detail::format_rate(p.value, "FLOP/s");
  return p;
}

peak_rate peak_dram_bandwidth(const device_info* d) {
  if (!d) return {0, "unknown peak: the trace has no deviceProperties for the device"};
  if (d->memory_clock_rate_khz <= 0 || d->memory_bus_width <= 0)
    return {0, "unknown peak: the trace's deviceProperties have no memoryClockRate or memoryBusWidth"};
  peak_rate p;
  p.value = 2.0 * double(d->memory_clock_rate_khz) * 1e3 * double(d->memory_bus_width) / 8.0;
  char buf[128];
  std::snprintf(buf, sizeof buf, "DRAM: 2 x %.3f GHz x %d bits / 8 = ", double(d->memory_clock_rate_khz) / 1e6,
                d->memory_bus_width);
  p.basis = buf + detail::format_rate(p.value, "B/s");
  return p;
}

// A copy or memset can beat DRAM when its data sits in the L2 cache (a source
// written just before, smaller than the cache: seen on an H100, a DtoD copy at
// 110% of the halved DRAM peak); a GEMM's FLOPs come from its scope's sizes,
// which cannot run faster than the tensor cores, so there the sizes are wrong.
std::string above_peak_note(const activity_throughput& r) {
  if (!(r.percent_of_peak() > 100.0)) return {};
  if (r.what == activity_throughput::measure::bytes)
    return "above the DRAM peak: the data was in the L2 cache, which DRAM's bandwidth does not bound";
  return "above the peak: the scope's M, N and K describe more work than this kernel did "
         "(sizes of another GEMM, or of several kernels that share the work)";
}

std::vector<activity_throughput> gpu_throughput(const trace& t) {
  std::vector<activity_throughput> out;
  for (std::size_t i = 0; i < t.gpu.size(); ++i) {
    const gpu_activity& g = t.gpu[i];
    if (g.end_ns <= g.start_ns) continue;
    activity_throughput r;
    r.gpu = std::uint32_t(i);
    r.seconds = double(g.end_ns - g.start_ns) / 1e9;
    const device_info* d = find_device(t, t.lane_of(g).device);
    if (moves_bytes(g.kind)) {
      const std::uint64_t bytes = t.bytes_of(g);
      if (!bytes) continue;
      r.what = activity_throughput::measure::bytes;
      r.amount = double(bytes);
      const bool device_only = g.kind == gpu_kind::memset || g.subkind == memcpy_device_to_device;
      if (!device_only) {
        r.peak.basis =
            std::string("unknown peak: a ") + memcpy_kind_name(g.subkind) + " copy crosses a link the trace does not describe";
      } else {
        r.peak = peak_dram_bandwidth(d);
        if (g.kind == gpu_kind::memcpy && r.peak.value > 0) {
          r.peak.value /= 2;
          r.peak.basis += ", halved: a device-to-device copy reads and writes each byte";
        }
      }
    } else if (g.kind == gpu_kind::kernel) {
      const kernel_name_info k = decode_kernel_name(t.names.str(g.name));
      if (k.category != kernel_category::gemm) continue;
      r.amount = gemm_flops(t, g);
      if (r.amount <= 0) continue;
      r.what = activity_throughput::measure::flops;
      r.peak = peak_flops(d, k.a_type);
    } else {
      continue;
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace cuprof
