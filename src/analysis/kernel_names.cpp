// Kernel-name decoding (cuprof/analysis.hpp, "Kernel names"): each family
// (nvjet, CUTLASS 3, CUTLASS 2, Triton, cuBLAS and cuBLASLt, ATen) is known by
// its prefix, and its name read token by token, '_' between tokens.
#include <cuprof/analysis.hpp>

#include <cuprof/base/text.hpp>

#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cuprof {

const char* category_name(kernel_category c) {
  switch (c) {
    case kernel_category::gemm: return "GEMM";
    case kernel_category::gemv: return "GEMV";
    case kernel_category::gemm_reduction: return "split-K reduction";
    case kernel_category::elementwise: return "elementwise";
    case kernel_category::reduction: return "reduction";
    default: return "other";
  }
}

std::string kernel_name_info::dtype() const {
  if (a_type.empty()) return output;
  return b_type.empty() || b_type == a_type ? a_type : a_type + " x " + b_type;
}

std::string kernel_name_info::tile() const {
  if (!tile_m) return {};
  std::string s = std::to_string(tile_m) + "x" + std::to_string(tile_n);
  if (tile_k) s += "x" + std::to_string(tile_k);
  return s;
}

std::string kernel_name_info::compact() const {
  if (!is_gemm() && category != kernel_category::gemm_reduction) return summary();
  std::string s = category_name(category);
  const auto add = [&s](const std::string& part) {
    if (!part.empty()) s += ' ' + part;
  };
  add(arch);
  add(dtype());
  add(tile());
  if (stages) add(std::to_string(stages) + (stages == 1 ? " stage" : " stages"));
  if (!cluster.empty()) add("cluster " + cluster);
  for (const char* coop : {"coopA", "coopB"})
    if (schedule.find(coop) != std::string::npos) add(coop);
  if (schedule.find("cooperative") != std::string::npos && schedule.find("coop") == std::string::npos) add("cooperative");
  if (schedule.find("ping-pong") != std::string::npos) add("ping-pong");
  if (epilogue.rfind("beta=0", 0) == 0) add("beta=0");
  else if (epilogue.rfind("beta=1", 0) == 0) add("beta=1");
  else add(epilogue);
  add(split_k);
  add(layout);
  if (alignment) add("align" + std::to_string(alignment));
  return s;
}

std::string kernel_name_info::summary() const {
  std::string s;
  const auto add = [&s](const std::string& part) {
    if (part.empty()) return;
    if (!s.empty()) s += ' ';
    s += part;
  };
  add(library);
  if (category != kernel_category::other) add(category_name(category));
  add(arch);
  std::string types = dtype();
  if (!accumulate.empty() || (!output.empty() && output != types)) {
    std::string inner;
    if (!accumulate.empty()) inner = "acc " + accumulate;
    if (!output.empty() && output != types) inner += std::string(inner.empty() ? "" : ", ") + "out " + output;
    types += (types.empty() ? "(" : " (") + inner + ")";
  }
  add(types);
  add(op_class);
  if (!instruction.empty()) add(instruction == "SIMT" ? instruction : "mma " + instruction);
  if (tile_m) add("tile " + tile());
  if (stages) add(std::to_string(stages) + (stages == 1 ? " stage" : " stages"));
  if (!cluster.empty()) add("cluster " + cluster);
  add(schedule);
  add(epilogue);
  if (!split_k.empty()) add(split_k);
  if (!layout.empty()) add("layout " + layout);
  if (alignment) add("align " + std::to_string(alignment));
  if (!op.empty())
    add(category == kernel_category::elementwise || category == kernel_category::reduction ? "(" + op + ")" : "fused " + op);
  return s;
}

namespace detail {
namespace {

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

bool all_alpha(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isalpha(static_cast<unsigned char>(c))) return false;
  return true;
}

std::uint32_t to_u32(std::string_view s) {
  std::uint64_t v = 0;
  for (char c : s) {
    v = v * 10 + std::uint64_t(c - '0');
    if (v > 0xFFFFFFFFull) return 0;
  }
  return std::uint32_t(v);
}

// "128x256" or "128x256x64": the numbers, or empty.
std::vector<std::uint32_t> dims(std::string_view s) {
  std::vector<std::uint32_t> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t x = s.find('x', start);
    const std::string_view part = s.substr(start, x == std::string_view::npos ? std::string_view::npos : x - start);
    if (!all_digits(part) || part.size() > 9) return {};
    out.push_back(to_u32(part));
    if (x == std::string_view::npos) break;
    start = x + 1;
  }
  return out.size() >= 2 ? out : std::vector<std::uint32_t>{};
}

std::string join_dims(const std::vector<std::uint32_t>& d) {
  std::string s;
  for (std::size_t i = 0; i < d.size(); ++i) s += (i ? "x" : "") + std::to_string(d[i]);
  return s;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const std::size_t p = s.find(sep, start);
    const std::string_view part = s.substr(start, p == std::string_view::npos ? std::string_view::npos : p - start);
    if (!part.empty()) out.push_back(part);
    if (p == std::string_view::npos) break;
    start = p + 1;
  }
  return out;
}

// The identifier starting at `pos`: letters, digits and underscores.
std::string_view identifier_at(std::string_view name, std::size_t pos) {
  std::size_t end = pos;
  while (end < name.size() && (std::isalnum(static_cast<unsigned char>(name[end])) || name[end] == '_')) ++end;
  return name.substr(pos, end - pos);
}

// Finds `prefix` at the start of an identifier (not inside another word).
std::size_t find_word(std::string_view name, std::string_view prefix) {
  std::size_t pos = name.find(prefix);
  while (pos != std::string_view::npos) {
    if (pos == 0 || !(std::isalnum(static_cast<unsigned char>(name[pos - 1])) || name[pos - 1] == '_')) return pos;
    pos = name.find(prefix, pos + 1);
  }
  return std::string_view::npos;
}

struct dtype_spelling {
  const char* token;
  const char* name;
};

// Longest spellings first: a concatenated token ("bf16bf16") is split greedily.
constexpr dtype_spelling dtype_spellings[] = {
    {"bf16", "bf16"},        {"tf32", "tf32"},        {"fp16", "fp16"},     {"fp32", "fp32"}, {"fp64", "fp64"},
    {"e4m3", "fp8 e4m3"},    {"e5m2", "fp8 e5m2"},    {"e2m1", "fp4 e2m1"}, {"int8", "int8"}, {"int32", "int32"},
    {"f16", "fp16"},         {"f32", "fp32"},         {"f64", "fp64"},      {"fp8", "fp8"},   {"fp4", "fp4"},
    {"i8", "int8"},          {"s8", "int8"},          {"u8", "uint8"},      {"i32", "int32"}, {"s32", "int32"},
    {"c32", "complex fp32"}, {"c64", "complex fp64"},
};

// A token made only of dtype spellings ("bf16", "bf16bf16", "bf16f32"), or empty.
std::vector<std::string> dtypes(std::string_view tok) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < tok.size()) {
    bool matched = false;
    for (const dtype_spelling& d : dtype_spellings) {
      const std::string_view t(d.token);
      if (tok.substr(pos, t.size()) == t) {
        out.emplace_back(d.name);
        pos += t.size();
        matched = true;
        break;
      }
    }
    if (!matched) return {};
  }
  return out;
}

// nvjet's type code letters.
std::string nvjet_type(char c) {
  switch (c) {
    case 'h': return "fp16";
    case 't': return "bf16";
    case 's': return "fp32";
    case 'd': return "fp64";
    default: return std::string("code '") + c + "'";
  }
}

// cuBLAS/CUTLASS accumulate letter in "s16816gemm", "hgemm", ...
std::string accumulate_letter(char c) {
  switch (c) {
    case 's': return "fp32";
    case 'h': return "fp16";
    case 'd': return "fp64";
    case 'i': return "int32";
    case 'c': return "complex fp32";
    case 'z': return "complex fp64";
    default: return {};
  }
}

// "16816" -> "m16n8k16", as NVIDIA's MMA shapes are spelled in kernel names.
std::string mma_shape(std::string_view digits) {
  static constexpr const char* known[][2] = {
      {"16816", "m16n8k16"}, {"1688", "m16n8k8"},   {"884", "m8n8k4"},     {"161616", "m16n16k16"}, {"8816", "m8n8k16"},
      {"8832", "m8n8k32"},   {"16832", "m16n8k32"}, {"16864", "m16n8k64"}, {"1684", "m16n8k4"},     {"16816x", "m16n8k16"},
  };
  for (const auto& k : known)
    if (digits == k[0]) return k[1];
  return std::string(digits);
}

bool is_layout(std::string_view tok, bool upper) {
  if (tok.size() < 2 || tok.size() > 4) return false;
  for (char c : tok)
    if (upper ? (c != 'N' && c != 'T') : (c != 'n' && c != 't')) return false;
  return true;
}

std::string epilogue_word(std::string_view tok) {
  if (tok == "bz") return "beta=0 (no C)";
  if (tok == "badd") return "beta=1 (C added)";
  if (tok == "bias" || tok == "relu" || tok == "gelu" || tok == "silu" || tok == "bgelu" || tok == "brelu" || tok == "dgelu" ||
      tok == "drelu" || tok == "aux" || tok == "swish" || tok == "tanh" || tok == "sigmoid")
    return std::string(tok);
  return {};
}

void add_to(std::string& s, std::string_view part) {
  if (part.empty()) return;
  if (!s.empty()) s += ' ';
  s += part;
}

// A GEMM token: "s16816gemm", "sgemm", "gcgemm", "gemm", "s64x128x16gemm", "gemv2T".
bool parse_gemm_token(std::string_view tok, kernel_name_info& k) {
  std::size_t at = tok.find("gemm");
  kernel_category cat = kernel_category::gemm;
  if (at == std::string_view::npos) {
    at = tok.find("gemv");
    cat = kernel_category::gemv;
  }
  if (at == std::string_view::npos) return false;
  k.category = cat;
  const std::string_view pre = tok.substr(0, at);
  if (pre.empty()) return true;
  const std::string acc = accumulate_letter(pre[0]);
  std::string_view digits = pre.substr(1);
  if (!acc.empty() && all_digits(digits)) {
    k.accumulate = acc;
    k.instruction = mma_shape(digits);
  } else if (!acc.empty() && digits.empty()) {  // "sgemm": plain SIMT GEMM in that type
    if (k.a_type.empty()) k.a_type = acc;
    k.accumulate = acc;
    k.instruction = "SIMT";
  } else if (!acc.empty() && !dims(digits).empty()) {  // CUTLASS 3: "s64x128x16gemm"
    k.accumulate = acc;
    k.instruction = "m" + std::to_string(dims(digits)[0]) + "n" + std::to_string(dims(digits)[1]) +
                    (dims(digits).size() > 2 ? "k" + std::to_string(dims(digits)[2]) : "");
  } else if (pre == "gc" || pre == "c") {
    k.a_type = "complex fp32";
  } else if (pre == "z") {
    k.a_type = "complex fp64";
  } else {
    k.unknown.emplace_back(pre);
  }
  return true;
}

std::string arch_of(std::string_view tok) {
  if (tok == "maxwell") return "sm50";
  if (tok == "pascal") return "sm60";
  if (tok == "volta") return "sm70";
  if (tok == "turing") return "sm75";
  if (tok == "ampere") return "sm80";
  if (tok == "ada") return "sm89";
  if (tok == "hopper") return "sm90";
  if (tok == "blackwell") return "sm100";
  if (tok.size() > 2 && tok.substr(0, 2) == "sm" && all_digits(tok.substr(2))) return std::string(tok);
  if (tok.size() > 2 && tok.substr(0, 2) == "sm" && tok.back() == 'a' && all_digits(tok.substr(2, tok.size() - 3)))
    return std::string(tok);
  return {};
}

// nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT
void decode_nvjet(std::string_view id, kernel_name_info& k) {
  k.library = "cuBLAS (nvjet)";
  k.category = kernel_category::gemm;
  const std::vector<std::string_view> t = split(id, '_');
  std::size_t i = 1;
  if (i < t.size() && !arch_of(t[i]).empty() && t[i].substr(0, 2) == "sm") k.arch = std::string(t[i++]);
  if (i < t.size() && all_alpha(t[i]) && !is_layout(t[i], true)) {
    const std::string_view code = t[i++];
    if (code.size() == 3) {
      k.a_type = nvjet_type(code[0]);
      k.accumulate = nvjet_type(code[1]);
      k.output = nvjet_type(code[2]);
    } else if (code.size() == 4) {
      k.a_type = nvjet_type(code[0]);
      k.b_type = nvjet_type(code[1]);
      k.accumulate = nvjet_type(code[2]);
      k.output = nvjet_type(code[3]);
    } else if (code.size() == 5) {
      k.a_type = nvjet_type(code[0]);
      k.b_type = nvjet_type(code[1]);
      k.accumulate = nvjet_type(code[3]);
      k.output = nvjet_type(code[4]);
    } else {
      k.unknown.emplace_back(code);
    }
  }
  int tiles = 0;
  for (; i < t.size(); ++i) {
    const std::string_view tok = t[i];
    const std::vector<std::uint32_t> d = dims(tok);
    if (d.size() == 2 && tiles < 3) {
      if (tiles == 0) {
        k.tile_m = d[0];
        k.tile_n = d[1];
      } else if (tiles == 1) {
        k.tile_k = d[0];
        k.stages = d[1];
      } else {
        k.cluster = join_dims(d);
      }
      ++tiles;
    } else if (!epilogue_word(tok).empty()) {
      add_to(k.epilogue, epilogue_word(tok));
    } else if (tok.size() == 5 && tok.substr(0, 4) == "coop") {
      add_to(k.schedule, "cooperative (" + std::string(tok) + ")");
    } else if (tok == "splitK" || tok == "splitk" || tok == "sk") {
      k.split_k = "split-K";
    } else if (tok == "streamK" || tok == "streamk") {
      k.split_k = "stream-K";
    } else if (tok.size() == 4 && std::isdigit(static_cast<unsigned char>(tok[0])) && tok.substr(1) == "cta") {
      add_to(k.schedule, std::string(tok.substr(0, 1)) + "-CTA MMA");
    } else if (i + 1 == t.size() && is_layout(tok, true)) {
      k.layout = std::string(tok);
    } else {
      k.unknown.emplace_back(tok);
    }
  }
}

// Names of the cuBLAS and CUTLASS families: tokens after the architecture (and
// the op class). Handles ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_nn,
// sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_..., cutlass_80_wmma_
// tensorop_bf16_s161616gemm_bf16_32x32_32x1_tn_align8 and cutlass3x_sm90_tensorop_
// gemm_bf16_bf16_f32_bf16_bf16_128x256x64_1x2x1_0_tnn_align8_warpspecialized_cooperative.
void decode_gemm_tokens(const std::vector<std::string_view>& t, std::size_t i, kernel_name_info& k, bool cutlass3) {
  std::vector<std::string> before, after;  // dtypes before and after the GEMM token
  bool seen_gemm = false, xmma = false;
  int tiles = 0;
  for (; i < t.size(); ++i) {
    const std::string_view tok = t[i];
    if (tok == "xmma") {
      xmma = true;
      continue;
    }
    if (!seen_gemm && (tok == "wmma" || tok == "tensorop" || tok == "simt" || tok == "wgmma" || tok == "umma")) {
      add_to(k.op_class, tok);
      continue;
    }
    if (!seen_gemm && parse_gemm_token(tok, k)) {
      seen_gemm = true;
      continue;
    }
    const std::vector<std::string> d = dtypes(tok);
    if (!d.empty()) {
      if (xmma && seen_gemm) {
        // xmma: {A}{B}_{C}{accumulate}_{compute}
        if (after.empty()) {
          k.a_type = d[0];
          if (d.size() > 1) k.b_type = d[1];
        } else if (after.size() == 1) {
          k.output = d[0];
          if (d.size() > 1) k.accumulate = d[1];
        }
        after.push_back(d[0]);
      } else {
        for (const std::string& x : d) (seen_gemm ? after : before).push_back(x);
      }
      continue;
    }
    if (tok.substr(0, 8) == "tilesize" && dims(tok.substr(8)).size() >= 2) {
      const std::vector<std::uint32_t> dd = dims(tok.substr(8));
      k.tile_m = dd[0];
      k.tile_n = dd[1];
      if (dd.size() > 2) k.tile_k = dd[2];
      continue;
    }
    if (tok.substr(0, 7) == "cgasize" && !dims(tok.substr(7)).empty()) {
      k.cluster = join_dims(dims(tok.substr(7)));
      continue;
    }
    if (tok.substr(0, 5) == "stage" && all_digits(tok.substr(5))) {
      k.stages = to_u32(tok.substr(5));
      continue;
    }
    if (tok == "stages" && i + 1 < t.size() && dims(t[i + 1]).size() == 2) {
      k.tile_k = dims(t[i + 1])[0];
      k.stages = dims(t[i + 1])[1];
      ++i;
      continue;
    }
    const std::vector<std::uint32_t> dd = dims(tok);
    if (!dd.empty()) {
      if (tiles == 0) {
        k.tile_m = dd[0];
        k.tile_n = dd[1];
        if (dd.size() > 2) k.tile_k = dd[2];
      } else if (tiles == 1 && !cutlass3 && dd.size() == 2 && !k.tile_k) {  // CUTLASS 2: K x stages
        k.tile_k = dd[0];
        k.stages = dd[1];
      } else if (tiles == 1 && cutlass3) {
        k.cluster = join_dims(dd);
      } else {
        k.unknown.emplace_back(tok);
      }
      ++tiles;
      continue;
    }
    if (tok.substr(0, 6) == "sliced" && !dims(tok.substr(6)).empty()) {
      add_to(k.schedule, "sliced-K " + join_dims(dims(tok.substr(6))));
      continue;
    }
    if (tok.substr(0, 5) == "align" && all_digits(tok.substr(5))) {
      k.alignment = to_u32(tok.substr(5));
      continue;
    }
    if (tok.substr(0, 3) == "ldg" && all_digits(tok.substr(3))) {
      k.alignment = to_u32(tok.substr(3));
      continue;
    }
    if (tok == "segment" && i + 2 < t.size() && t[i + 1] == "k") {
      k.split_k = std::string("segment-K ") + std::string(t[i + 2]);
      i += 2;
      continue;
    }
    if (tok == "splitk" || tok == "splitK" || tok == "splitKreduce") {
      k.split_k = "split-K";
      continue;
    }
    if (tok == "streamk" || tok == "streamK") {
      k.split_k = "stream-K";
      continue;
    }
    if ((is_layout(tok, false) || is_layout(tok, true)) && k.layout.empty()) {
      k.layout = std::string(tok);
      continue;
    }
    if (xmma && (tok == "n" || tok == "t") && !k.layout.empty()) {  // xmma: C's layout after A/B's
      k.layout += " (C " + std::string(tok) + ")";
      continue;
    }
    if (cutlass3 && all_digits(tok)) {
      k.stages = to_u32(tok);  // 0: chosen automatically
      continue;
    }
    if (!epilogue_word(tok).empty()) {
      add_to(k.epilogue, epilogue_word(tok));
      continue;
    }
    if (tok == "warpspecialized" || tok == "cooperative" || tok == "pingpong" || tok == "persistent") {
      add_to(k.schedule, tok == "warpspecialized" ? "warp-specialized" : tok == "pingpong" ? "ping-pong" : tok);
      continue;
    }
    if (tok == "f2f" || tok == "kernel" || tok == "execute" || tok == "cublas" || tok == "epi" || tok == "tma" || tok == "5x" ||
        tok.substr(0, 8) == "warpsize" || tok.substr(0, 13) == "warpgroupsize" || tok.substr(0, 6) == "tensor")
      continue;  // understood, nothing to show
    k.unknown.emplace_back(tok);
  }
  if (xmma) return;
  if (!before.empty()) {
    k.a_type = before[0];
    if (before.size() > 1 && before[1] != before[0]) k.b_type = before[1];
    if (!after.empty()) k.output = after.back();
  } else if (after.size() >= 5) {  // CUTLASS 3: A, B, accumulate, C, D
    k.a_type = after[0];
    k.b_type = after[1] != after[0] ? after[1] : "";
    k.accumulate = after[2];
    k.output = after[4];
  } else if (after.size() == 4) {
    k.a_type = after[0];
    k.b_type = after[1] != after[0] ? after[1] : "";
    k.accumulate = after[2];
    k.output = after[3];
  } else if (after.size() == 3) {
    k.a_type = after[0];
    k.accumulate = after[1];
    k.output = after[2];
  } else if (!after.empty()) {
    k.output = after.back();
  }
}

// at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>, ...>
std::string aten_functor(std::string_view name) {
  std::size_t p = name.find("Functor_");
  if (p != std::string_view::npos) {
    std::string_view rest = name.substr(p + 8);
    return std::string(identifier_at(rest, 0));
  }
  // The last "<Op>Functor" / "<Op>CUDAKernelImpl" that names an operation.
  std::string found;
  for (std::string_view suffix : {std::string_view("Functor"), std::string_view("CUDAKernelImpl")}) {
    p = name.find(suffix);
    while (p != std::string_view::npos) {
      std::size_t b = p;
      while (b > 0 && std::isalnum(static_cast<unsigned char>(name[b - 1]))) --b;
      const std::string_view word = name.substr(b, p - b);
      if (!word.empty() && word != "Binary" && word != "Unary" && word != "AUnary" && word != "BUnary" && word != "CUDA")
        found = std::string(word);
      p = name.find(suffix, p + 1);
    }
    if (!found.empty()) return found;
  }
  return found;
}

}  // namespace
}  // namespace detail

kernel_name_info decode_kernel_name(std::string_view name) {
  using namespace detail;
  kernel_name_info k;
  std::size_t pos;
  if ((pos = find_word(name, "nvjet_")) != std::string_view::npos) {
    decode_nvjet(identifier_at(name, pos), k);
    return k;
  }
  if ((pos = find_word(name, "cutlass3x_")) != std::string_view::npos) {
    const std::vector<std::string_view> t = split(identifier_at(name, pos), '_');
    k.library = "CUTLASS 3";
    std::size_t i = 1;
    if (i < t.size() && !arch_of(t[i]).empty()) k.arch = arch_of(t[i++]);
    decode_gemm_tokens(t, i, k, true);
    if (k.category == kernel_category::other) k.category = kernel_category::gemm;
    return k;
  }
  pos = find_word(name, "cutlass_");
  while (pos != std::string_view::npos && !(pos + 8 < name.size() && std::isdigit(static_cast<unsigned char>(name[pos + 8]))))
    pos = name.find("cutlass_", pos + 1);
  if (pos != std::string_view::npos) {
    const std::vector<std::string_view> t = split(identifier_at(name, pos), '_');
    k.library = "CUTLASS";
    k.arch = "sm" + std::string(t[1]);
    decode_gemm_tokens(t, 2, k, false);
    return k;
  }
  if ((pos = find_word(name, "triton_")) != std::string_view::npos) {
    const std::string_view id = identifier_at(name, pos);
    const std::vector<std::string_view> t = split(id, '_');
    k.library = "Triton (Inductor)";
    if (t.size() > 1) {
      if (t[1] == "poi") k.category = kernel_category::elementwise;
      else if (t[1] == "red" || t[1] == "per") k.category = kernel_category::reduction;
      else if (t[1] == "tem" || t[1] == "mm" || t[1] == "bmm") k.category = kernel_category::gemm;
      if (t[1] == "per") k.schedule = "persistent";
    }
    const std::size_t fused = id.find("_fused_");
    if (fused != std::string_view::npos) {
      std::string_view ops = id.substr(fused + 7);
      const std::size_t last = ops.rfind('_');
      if (last != std::string_view::npos && all_digits(ops.substr(last + 1))) ops = ops.substr(0, last);
      k.op = std::string(ops);
      if (k.category == kernel_category::other && (ops.find("mm") != std::string_view::npos)) k.category = kernel_category::gemm;
    }
    return k;
  }
  // cuBLAS (legacy arch-prefixed names) and cuBLASLt's xmma names.
  {
    std::string_view id = name;
    if (id.substr(0, 5) == "void ") id = id.substr(5);
    id = identifier_at(id, 0);
    const std::vector<std::string_view> t = split(id, '_');
    if (t.size() >= 3 && !arch_of(t[0]).empty() &&
        (id.find("gemm") != std::string_view::npos || id.find("gemv") != std::string_view::npos)) {
      k.library = id.find("xmma") != std::string_view::npos ? "cuBLASLt" : "cuBLAS";
      k.arch = arch_of(t[0]);
      decode_gemm_tokens(t, 1, k, false);
      if (k.category == kernel_category::other) k.category = kernel_category::gemm;
      return k;
    }
  }
  if (name.find("splitKreduce") != std::string_view::npos) {
    k.library = "cuBLASLt";
    k.category = kernel_category::gemm_reduction;  // finishes a split-K GEMM
    return k;
  }
  if (name.find("at::native::") != std::string_view::npos) {
    k.library = "ATen";
    if (name.find("elementwise") != std::string_view::npos) k.category = kernel_category::elementwise;
    else if (name.find("reduce") != std::string_view::npos) k.category = kernel_category::reduction;
    k.op = detail::aten_functor(name);
    return k;
  }
  const std::string lower = detail::ascii_lowercase(name);
  if (lower.find("cublas") != std::string::npos)
    k.library = name.find("cublasLt") != std::string_view::npos ? "cuBLASLt" : "cuBLAS";
  if (lower.find("gemv") != std::string::npos) {
    k.category = kernel_category::gemv;
  } else if (lower.find("gemm") != std::string::npos) {
    k.category = kernel_category::gemm;
    const std::size_t p = name.find("gemmSN_");  // cuBLAS small-N GEMM: gemmSN_TN_kernel
    if (p != std::string_view::npos && p + 9 <= name.size() && is_layout(name.substr(p + 7, 2), true))
      k.layout = std::string(name.substr(p + 7, 2));
  } else if (lower.find("elementwise") != std::string::npos || lower.find("map_kernel") != std::string::npos ||
             lower.find("pointwise") != std::string::npos) {
    k.category = kernel_category::elementwise;
    const std::size_t p = name.find("map_kernel<");  // map_kernel<add_op>: the functor
    if (p != std::string_view::npos) k.op = std::string(identifier_at(name, p + 11));
  } else if (lower.find("reduce") != std::string::npos || lower.find("reduction") != std::string::npos) {
    k.category = kernel_category::reduction;
  }
  return k;
}

std::string compact_kernel_name(std::string_view name) { return decode_kernel_name(name).compact(); }

}  // namespace cuprof
