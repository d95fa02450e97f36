// What a profile records: torch.profiler's ProfilerActivity.
#pragma once

namespace cuprof {

enum class activity : unsigned { cpu = 1, cuda = 2 };
constexpr activity operator|(activity a, activity b) noexcept { return activity(unsigned(a) | unsigned(b)); }
constexpr bool has(activity set, activity a) noexcept { return (unsigned(set) & unsigned(a)) != 0; }

}  // namespace cuprof
