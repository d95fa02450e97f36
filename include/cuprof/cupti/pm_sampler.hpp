// GPU hardware metrics through CUPTI's PM sampling (cupti_pmsampling.h): the
// GPU's performance monitors read at a fixed interval, GPU-wide, while kernels
// run at full speed (no replay, no serialization).
//
// One sampler per process, owned by the tracer. Each device the program has a
// context on gets a PM sampling object, a single-pass configuration of the
// metrics and a hardware buffer. Two threads of its own empty that buffer, so
// neither the program's threads nor CUPTI's callbacks pay for it:
//   - the decoder moves the hardware buffer's records into counter data images
//     every few milliseconds (CUPTI's decode: 55 to 150 us of CPU a sample of
//     the default set on an H200, the most while long GEMMs keep it busy);
//   - the evaluator turns an image's samples into metric values (about 40 us
//     a sample) and gives the image back.
// On one thread the two took more than 100 us a sample: at that period the
// hardware buffer overflowed and whole kernels went unsampled. Both run only
// on CPU time the program leaves (SCHED_IDLE): at the default interval they
// take about two thirds of a core, and at normal priority a training loop
// pinned to four cores ran 12 to 24 % slower beside them. Images cycle
// through a small pool, which the evaluator tops up before anything else
// when the decoder has no free image; until then the decoder leaves the
// records in the hardware buffer, which holds many more.
// Samples are kept, up to a cap, until a window takes them; what could not be
// sampled is kept as gaps with their cause.
#pragma once

#include "../base/env.hpp"
#include "../base/log.hpp"
#include "../base/threads.hpp"
#include "../collect/clock.hpp"
#include "../model/gpu_metrics.hpp"
#include "pm_samples.hpp"
#include "pm_setup.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace cuprof::detail::cupti {

class pm_sampler {
 public:
  // How often the decoder empties the hardware buffers. Each decode call costs
  // about half a millisecond besides its samples' 70 us each (H200): at 2 ms
  // that was a quarter of the decoder's time. Well inside room_ms, so that a
  // decode finds the image room for what came since the last one.
  static constexpr int decode_period_ms = 10;
  // take() waits this long at most for the samples up to its window's end.
  static constexpr int catch_up_ms = 30;
  // The hardware buffer per device: many decode periods of samples, so that a
  // decoder kept from running for a while, or without a free image, loses none.
  static constexpr std::size_t hardware_buffer_bytes = std::size_t(128) << 20;
  // An image holds this long of samples (and some). A decode takes every
  // record the hardware buffer holds and keeps what fits the image: on an
  // H200, a decode that filled its image lost the samples past it (the next
  // decode found none of them), and decoding costs up to 150 us of CPU a
  // sample, so a decoder kept from running for a few milliseconds comes
  // back to a long decode. So an image goes to the evaluator before a decode
  // could fill it: once less than room_ms of samples fit, or less than the
  // decode may bring (hands_off_before_decode). A window taken meanwhile gets
  // a copy of the image's completed samples.
  static constexpr int image_ms = 40, room_ms = 25;
  // Images per device besides the one being decoded into: how far the
  // evaluator may fall behind the decoder before the hardware buffer takes up
  // the slack. The evaluator makes them, as they are needed (megabytes
  // each, their pages touched: never on the decoder's time).
  static constexpr std::size_t spare_images = 4;
  // A counter data image holds this many bytes at most (its size grows with the
  // metrics' raw counters: about 72 KiB a sample for the four labelled metrics on GH100).
  static constexpr std::size_t max_image_bytes = std::size_t(40) << 20;
  // Samples kept for windows not yet taken, all devices together (CUPROF_GPU_METRICS_MAX_SAMPLES).
  static std::size_t max_kept_samples() {
    const char* v = std::getenv("CUPROF_GPU_METRICS_MAX_SAMPLES");
    return read_record_cap("CUPROF_GPU_METRICS_MAX_SAMPLES", v, 2000000).value;
  }

  // Loads the API and starts the decoder and evaluator. Empty on success.
  std::string open(const driver_library& driver, const pm_sampling_request& request) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (opened_)
      return request_matches(request) ? std::string() : "GPU metrics were already set up with other metrics in this process";
    const std::string why = pm_.load();
    if (!why.empty()) return why;
    driver_ = &driver;
    request_ = request;
    if (request_.metrics.empty()) request_.metrics = default_gpu_metrics();
    if (request_.interval_ns == 0) request_.interval_ns = default_gpu_metrics_interval_ns;
    max_kept_ = max_kept_samples();
    std::string no_thread;
    if (!start_detached_thread(no_thread, &pm_sampler::run_evaluator, this)) return no_thread;
    if (!start_detached_thread(no_thread, &pm_sampler::run_thread, this)) {
      closed_ = true;  // the evaluator leaves
      evaluated_.notify_all();
      return no_thread;
    }
    opened_ = true;
    return {};
  }

  // Samples from now on, on each device with a context (and, from the decode
  // thread, on devices that get one later), until pause().
  void resume() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!opened_ || closed_) return;
    sampling_ = true;
    start_ready_devices();
    wake_.notify_all();
  }

  // Stops sampling and decodes what the hardware buffers still hold.
  void pause() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (opened_ && sampling_) stop_and_drain(lock);
  }

  // For the exit path: no CUPTI call after this. What the hardware buffers
  // hold is decoded and evaluated first, so that the last window keeps its
  // end (an image's samples take milliseconds; two seconds at most in all).
  void close() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (closed_) return;
    if (opened_ && sampling_) stop_and_drain(lock);
    evaluated_.wait_for(lock, std::chrono::seconds(2), [&] { return queue_.empty() && !evaluating_; });
    closed_ = true;
    wake_.notify_all();
    evaluated_.notify_all();
    evaluated_.wait_for(lock, std::chrono::seconds(1), [&] { return !evaluating_; });
  }

  // Moves the samples of [from_ns, to_ns] (epoch ns) into `out`, one series
  // per device, and drops older ones. `clock` maps tick-domain timestamps.
  // While sampling goes on, what is decoded by now is evaluated first (for
  // `max_wait` at most; past it, the samples not evaluated stay for the next
  // window).
  void take(std::vector<gpu_metric_series>& out, std::uint64_t from_ns, std::uint64_t to_ns, const tick_converter& clock,
            std::chrono::milliseconds max_wait = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (sampling_ && !closed_)
      for (device& d : devices_)
        if (d.running) {
          catch_up(d, to_ns, clock, lock);
          hand_off_copy(d);
        }
    evaluated_.notify_all();
    evaluated_.wait_for(lock, max_wait, [&] { return closed_ || (queue_.empty() && !evaluating_); });
    for (device& d : devices_) {
      if (d.failed) continue;
      gpu_metric_series s = d.samples.take(d.index, request_.interval_ns, from_ns, to_ns, clock, kept_total_);
      if (s.size() || s.dropped || !s.gaps.empty()) out.push_back(std::move(s));
    }
  }

  // Why GPUs could not be sampled ("GPU metrics are off on GPU 1: ..."), each said once.
  std::vector<std::string> refusals() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> lines;
    if (!init_why_.empty() && !said_init_) {
      said_init_ = true;
      lines.push_back("GPU metrics are off: " + init_why_);
    }
    for (device& d : devices_)
      if (d.failed && !d.said) {
        d.said = true;
        lines.push_back("GPU metrics are off on GPU " + std::to_string(d.index) + ": " + d.why);
      }
    return lines;
  }

 private:
  // Samples of an image, for the evaluator.
  struct image_job {
    std::uint32_t device = 0;
    std::vector<std::uint8_t> image;
    bool copy = false;                   // a copy of the image still decoded into: freed, not pooled
    std::size_t first = 0;               // the first sample to evaluate
    std::vector<pm_sample_times> times;  // from `first` on: read by the decoder, which has the PM sampling object
    bool fresh_start = false;            // `first` is the first sample since a start
    pm_lost_samples gap_before;          // samples were lost before `first`, since the last sample
  };

  struct device {
    std::uint32_t index = 0;
    bool failed = false, said = false, running = false;
    bool fresh_start = false;    // the next sample decoded is the first since a start
    pm_lost_samples gap_before;  // samples were lost before the next one decoded
    std::string why;
    CUpti_PmSampling_Object* object = nullptr;
    CUpti_Profiler_Host_Object* host = nullptr;  // the evaluator's only
    std::vector<std::uint8_t> config, blank_image;
    std::vector<std::uint8_t> image;           // decoded into; empty: none free
    std::size_t image_queued = 0;              // its samples a copy of which went to the evaluator
    std::vector<pm_sample_times> image_times;  // of the completed samples in `image`, in order
    bool image_fresh = false;                  // image_job's flags for the image's first sample
    pm_lost_samples image_gap_before;
    std::size_t image_capacity = 0;                      // samples an image holds
    std::size_t handoff_at = 0;                          // samples in an image that leave it room_ms of room
    std::chrono::steady_clock::time_point last_decode;   // when the last decode began
    std::vector<std::vector<std::uint8_t>> free_images;  // blank, for the decoder
    std::size_t images_made = 0;
    pm_sample_log samples;  // evaluated, until a window takes them
  };

  // Sampling stops on every device, and what its hardware buffer holds goes
  // to the evaluator. The next sample decoded is the first of a start.
  void stop_and_drain(std::unique_lock<std::mutex>& lock) {
    sampling_ = false;
    for (device& d : devices_)
      if (d.running) {
        CUpti_PmSampling_Stop_Params p{};
        p.structSize = CUpti_PmSampling_Stop_Params_STRUCT_SIZE;
        p.pPmSamplingObject = d.object;
        pm_.stop(&p);
        d.running = false;
        decode(d, &lock);
        hand_off(d);
        d.fresh_start = true;
      }
  }

  // While sampling goes on, the samples of a window's last work are still on
  // their way when its records are in: the hardware writes a sample after
  // its interval and the decoder reads every decode_period_ms. Decodes until
  // a sample ends at `to_ns` or catch_up_ms pass (a device that stopped
  // sampling, a clock not known yet), so the window's last kernels get theirs.
  void catch_up(device& d, std::uint64_t to_ns, const tick_converter& clock, std::unique_lock<std::mutex>& lock) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(catch_up_ms);
    for (;;) {
      decode(d);
      if (!d.running || d.failed) return;
      if (!d.image_times.empty()) {
        const std::uint64_t end = d.image_times.back().end;
        d.samples.learn_clock(end, realtime_ns(), now_ticks());  // as the evaluated samples would
        if (d.samples.to_epoch(end, clock) >= to_ns) return;
      }
      if (std::chrono::steady_clock::now() >= deadline) return;
      wake_.wait_for(lock, std::chrono::milliseconds(1));  // the lock free for the evaluator meanwhile
    }
  }

  static void run_thread(pm_sampler* s) { s->run(); }
  static void run_evaluator(pm_sampler* s) { s->evaluate_images(); }

  void run() {
    run_only_on_idle_cpu();
    std::unique_lock<std::mutex> lock(mutex_);
    while (!closed_) {
      wake_.wait_for(lock, std::chrono::milliseconds(decode_period_ms));
      if (closed_ || !sampling_) continue;
      // `cuprof run` starts cuprof inside the program's cuInit; until this
      // thread has called cuInit itself, the driver answers it "not initialized".
      // Never from inside cuInit, and not holding the lock resume() takes there.
      if (!driver_ready_) {
        if (process().inside_cuda_init.load()) continue;
        lock.unlock();
        const bool ready = driver_->init(0) == CUDA_SUCCESS;
        lock.lock();
        if (!ready) continue;
        driver_ready_ = true;
      }
      start_ready_devices();
      for (device& d : devices_)
        if (d.running) decode(d);
    }
  }

  // The decoder's image, full or done with, to the evaluator (its samples not
  // yet queued); the next free one (if any) to the decoder.
  void hand_off(device& d) {
    if (d.image.empty() || d.image_times.empty()) return;
    image_job job = job_of(d);
    job.image = std::move(d.image);
    queue_.push_back(std::move(job));
    d.image.clear();
    d.image_times.clear();
    d.image_queued = 0;
    d.image_fresh = false;
    d.image_gap_before = {};
    take_free_image(d);
    evaluated_.notify_all();
  }

  // A copy of the image's completed samples not yet queued, to the evaluator,
  // while the decoder goes on with the image.
  void hand_off_copy(device& d) {
    if (d.image.empty() || d.image_times.size() <= d.image_queued) return;
    image_job job = job_of(d);
    job.image = d.image;
    job.copy = true;
    queue_.push_back(std::move(job));
    d.image_queued = d.image_times.size();
    evaluated_.notify_all();
  }

  image_job job_of(const device& d) const {
    image_job job;
    job.device = d.index;
    job.first = d.image_queued;
    job.times.assign(d.image_times.begin() + std::ptrdiff_t(d.image_queued), d.image_times.end());
    job.fresh_start = d.image_queued == 0 && d.image_fresh;
    if (d.image_queued == 0) job.gap_before = d.image_gap_before;
    return job;
  }

  // The next image to decode into, if one is free.
  void take_free_image(device& d) {
    if (!d.image.empty() || d.free_images.empty()) return;
    d.image = std::move(d.free_images.back());
    d.free_images.pop_back();
    if (d.free_images.empty()) evaluated_.notify_all();  // the evaluator makes another
  }

  // A device whose decoder would find no free image next: the evaluator makes one.
  device* needs_image() {
    for (device& d : devices_)
      if (!d.failed && d.object && d.free_images.empty() && d.images_made < 1 + spare_images) return &d;
    return nullptr;
  }

  // The evaluator: each image's samples into values, outside the lock (CUPTI's
  // host API on the device's host object, which nothing else uses once set
  // up); then, under it, into the device's samples, and the image, blank
  // again, back to the decoder.
  void evaluate_images() {
    run_only_on_idle_cpu();
    std::unique_lock<std::mutex> lock(mutex_);
    std::vector<const char*> names;
    for (const gpu_metric& m : request_.metrics) names.push_back(m.name.c_str());
    const std::size_t nm = names.size();
    std::vector<pm_sample_times> samples;
    std::vector<double> values;
    while (true) {
      evaluated_.wait(lock, [&] { return closed_ || !queue_.empty() || needs_image(); });
      if (closed_) return;
      // A decoder without a free image first: its records wait in the hardware
      // buffer meanwhile, and its next decode, more than an image's worth, would
      // lose what does not fit. Evaluating can wait.
      if (device* d = needs_image()) {
        ++d->images_made;
        const std::vector<std::uint8_t>* blank = &d->blank_image;  // set up once, never changed
        evaluating_ = true;
        lock.unlock();
        std::vector<std::uint8_t> image(*blank);
        lock.lock();
        evaluating_ = false;
        d->free_images.push_back(std::move(image));
        take_free_image(*d);
        evaluated_.notify_all();
        continue;
      }
      image_job job = std::move(queue_.front());
      queue_.pop_front();
      device* d = find(job.device);
      if (!d) continue;
      CUpti_Profiler_Host_Object* host = d->host;
      const std::vector<std::uint8_t>* blank = &d->blank_image;  // set up once, never changed
      evaluating_ = true;
      lock.unlock();
      samples.clear();
      values.clear();
      for (std::size_t i = 0; i < job.times.size(); ++i) {
        values.resize(values.size() + nm, __builtin_nan(""));
        CUpti_Profiler_Host_EvaluateToGpuValues_Params ev{};
        ev.structSize = CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE;
        ev.pHostObject = host;
        ev.pCounterDataImage = job.image.data();
        ev.counterDataImageSize = job.image.size();
        ev.rangeIndex = job.first + i;
        ev.ppMetricNames = names.data();
        ev.numMetrics = nm;
        ev.pMetricValues = &values[values.size() - nm];
        if (pm_.host_evaluate(&ev) != CUPTI_SUCCESS) {
          values.resize(values.size() - nm);
          continue;
        }
        samples.push_back(job.times[i]);
      }
      if (job.copy) std::vector<std::uint8_t>().swap(job.image);
      else std::memcpy(job.image.data(), blank->data(), std::min(job.image.size(), blank->size()));
      lock.lock();
      evaluating_ = false;
      d->samples.add(samples.data(), values.data(), samples.size(), job.fresh_start, job.gap_before, request_.interval_ns,
                     kept_total_, max_kept_, realtime_ns(), now_ticks());
      if (!job.copy) {
        d->free_images.push_back(std::move(job.image));
        take_free_image(*d);
      }
      evaluated_.notify_all();
    }
  }

  bool request_matches(const pm_sampling_request& r) const {
    if (r.interval_ns && r.interval_ns != request_.interval_ns) return false;
    if (r.metrics.empty()) return true;
    if (r.metrics.size() != request_.metrics.size()) return false;
    for (std::size_t i = 0; i < r.metrics.size(); ++i)
      if (r.metrics[i].name != request_.metrics[i].name) return false;
    return true;
  }

  // Devices with an active primary context that are not set up yet are set up
  // and started; each device is tried once.
  void start_ready_devices() {
    if (!init_why_.empty()) return;
    int count = 0;
    const CUresult cr = driver_->device_get_count(&count);
    if (cr != CUDA_SUCCESS) return;
    for (int i = 0; i < count; ++i) {
      device* d = find(std::uint32_t(i));
      if (!d) {
        CUdevice dev;
        unsigned flags = 0;
        int active = 0;
        if (driver_->device_get(&dev, i) != CUDA_SUCCESS) continue;
        const CUresult st = driver_->primary_ctx_get_state(dev, &flags, &active);
        if (st != CUDA_SUCCESS || !active) continue;
        // CUPTI's profiler needs the driver and a context up: it fails with an
        // unknown error when initialized from inside cuInit, where `cuprof run`
        // starts; so only here, when the first device has its context.
        if (!profiler_initialized_) {
          CUpti_Profiler_Initialize_Params init{};
          init.structSize = CUpti_Profiler_Initialize_Params_STRUCT_SIZE;
          const CUptiResult r = pm_.profiler_initialize(&init);
          if (r != CUPTI_SUCCESS) {
            init_why_ = pm_refusal(pm_, "cuptiProfilerInitialize", r);
            return;
          }
          profiler_initialized_ = true;
        }
        devices_.emplace_back();
        d = &devices_.back();
        d->index = std::uint32_t(i);
        // The device's context current on this thread, as a program's thread
        // has it when it sets up PM sampling itself.
        CUcontext ctx = nullptr, popped = nullptr;
        const bool pushed = driver_->primary_ctx_retain(&ctx, dev) == CUDA_SUCCESS && driver_->ctx_push(ctx) == CUDA_SUCCESS;
        set_up(*d, dev);
        if (pushed) driver_->ctx_pop(&popped);
        if (ctx) driver_->primary_ctx_release(dev);
      }
      if (d->failed || d->running) continue;
      CUpti_PmSampling_Start_Params p{};
      p.structSize = CUpti_PmSampling_Start_Params_STRUCT_SIZE;
      p.pPmSamplingObject = d->object;
      const CUptiResult r = pm_.start(&p);
      if (r != CUPTI_SUCCESS) fail(*d, "cuptiPmSamplingStart", r);
      else d->running = d->fresh_start = true;
    }
  }

  device* find(std::uint32_t index) {
    for (device& d : devices_)
      if (d.index == index) return &d;
    return nullptr;
  }

  void fail(device& d, const char* call, CUptiResult r) {
    d.failed = true;
    d.why = pm_refusal(pm_, call, r);
  }

  void set_up(device& d, CUdevice dev) {
    pm_device_setup set{};
    d.why = set_up_pm_device(pm_, d.index, dev, request_, {hardware_buffer_bytes, image_ms, room_ms, max_image_bytes}, set);
    d.host = set.host;
    d.object = set.object;
    if (!d.why.empty()) {
      d.failed = true;
      return;
    }
    d.config = std::move(set.config);
    d.image = set.blank_image;
    d.blank_image = std::move(set.blank_image);  // a copy is cheaper than initializing again before each decode
    d.images_made = 1;
    d.image_capacity = set.image_capacity;
    d.handoff_at = set.handoff_at;
    d.samples.set_metrics(request_.metrics);
  }

  // Moves the device's hardware buffer's records into images, each one with
  // less than room_ms of room to the evaluator. Without a free image the
  // records wait in the hardware buffer. `drain` (the caller's lock): after a
  // stop, until CUPTI says the records are all decoded (a round may end for
  // other reasons with records left), waiting for a free image if need be.
  void decode(device& d, std::unique_lock<std::mutex>* drain = nullptr) {
    const auto now = std::chrono::steady_clock::now();
    const std::size_t brings = samples_a_decode_brings(
        std::uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(now - d.last_decode).count()), request_.interval_ns);
    d.last_decode = now;
    for (int round = 0; round < 64; ++round) {
      if (!d.image.empty() && hands_off_before_decode(d.image_times.size(), d.image_capacity, d.handoff_at, brings)) hand_off(d);
      take_free_image(d);
      if (d.image.empty() && drain)
        evaluated_.wait_for(*drain, std::chrono::seconds(2), [&] {
          take_free_image(d);
          return !d.image.empty();
        });
      if (d.image.empty()) return;
      CUpti_PmSampling_DecodeData_Params dd{};
      dd.structSize = CUpti_PmSampling_DecodeData_Params_STRUCT_SIZE;
      dd.pPmSamplingObject = d.object;
      dd.pCounterDataImage = d.image.data();
      dd.counterDataImageSize = d.image.size();
      const CUptiResult r = pm_.decode(&dd);
      if (dd.overflow) d.samples.count_dropped(1);  // at least one: the hardware does not say how many
      if (r != CUPTI_SUCCESS && r != CUPTI_ERROR_OUT_OF_MEMORY) return;
      CUpti_PmSampling_GetCounterDataInfo_Params info{};
      info.structSize = CUpti_PmSampling_GetCounterDataInfo_Params_STRUCT_SIZE;
      info.pCounterDataImage = d.image.data();
      info.counterDataImageSize = d.image.size();
      if (pm_.counter_data_info(&info) != CUPTI_SUCCESS) return;
      const std::size_t before = d.image_times.size();
      if (info.numCompletedSamples > before) {
        if (before == 0) {
          d.image_fresh = d.fresh_start;
          d.image_gap_before = d.gap_before;
          d.fresh_start = false;
          d.gap_before = {};
        }
        for (std::size_t i = before; i < info.numCompletedSamples; ++i) {
          CUpti_PmSampling_CounterData_GetSampleInfo_Params si{};
          si.structSize = CUpti_PmSampling_CounterData_GetSampleInfo_Params_STRUCT_SIZE;
          si.pPmSamplingObject = d.object;
          si.pCounterDataImage = d.image.data();
          si.counterDataImageSize = d.image.size();
          si.sampleIndex = i;
          // A sample without its times is kept as no time: the sample log leaves it out, the others keep their index.
          if (pm_.sample_info(&si) != CUPTI_SUCCESS) si.startTimestamp = si.endTimestamp = 0;
          d.image_times.push_back({si.startTimestamp, si.endTimestamp});
        }
      }
      if (r == CUPTI_ERROR_OUT_OF_MEMORY) {
        // The hardware buffer overflowed: sampling stops until started again.
        hand_off(d);
        CUpti_PmSampling_Stop_Params stop{};
        stop.structSize = CUpti_PmSampling_Stop_Params_STRUCT_SIZE;
        stop.pPmSamplingObject = d.object;
        pm_.stop(&stop);
        CUpti_PmSampling_Start_Params start{};
        start.structSize = CUpti_PmSampling_Start_Params_STRUCT_SIZE;
        start.pPmSamplingObject = d.object;
        if (sampling_ && pm_.start(&start) != CUPTI_SUCCESS) d.running = false;
        d.fresh_start = true;
        d.gap_before = {true, metric_gap_cause::overflow};
        return;
      }
      const bool full = dd.decodeStopReason == CUPTI_PM_SAMPLING_DECODE_STOP_REASON_COUNTER_DATA_FULL;
      if (full) {
        hand_off(d);
        d.gap_before = {true, metric_gap_cause::late};  // the samples past the image are lost
      }
      if (dd.decodeStopReason == CUPTI_PM_SAMPLING_DECODE_STOP_REASON_END_OF_RECORDS) return;
      if (!full && (!drain || info.numCompletedSamples == before)) return;
    }
  }

  pm_library pm_;
  const driver_library* driver_ = nullptr;
  pm_sampling_request request_;
  std::mutex mutex_;                   // every PM sampling call is made under it; the host API's evaluation is not
  std::condition_variable wake_;       // the decoder's
  std::condition_variable evaluated_;  // the evaluator's: a job queued, an image evaluated, closing
  std::deque<image_job> queue_;        // images for the evaluator, in the order decoded
  bool evaluating_ = false;            // the evaluator holds an image outside the lock
  std::deque<device> devices_;         // stable addresses: the evaluator keeps one across its unlocked work
  std::size_t kept_total_ = 0, max_kept_ = 0;
  bool opened_ = false, sampling_ = false, closed_ = false;
  bool profiler_initialized_ = false, said_init_ = false, driver_ready_ = false;
  std::string init_why_;  // cuptiProfilerInitialize failed: no device is sampled
};

}  // namespace cuprof::detail::cupti
