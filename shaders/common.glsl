// Shared helpers for the compute shaders.
// Conventions: storage buffers are bound whole (each is one sub-allocation);
// push constants carry element offsets into them. 16-bit storage types are
// read through uint words so no 16-bit storage feature is needed:
// element i of an f16/bf16 tensor lives in word i >> 1, half i & 1.
#extension GL_EXT_control_flow_attributes : enable

#define HN_DT_F32 0u
#define HN_DT_F16 1u
#define HN_DT_BF16 2u

// The attention kernels' window word: 0 none; w < 2^31 a sliding window (keys j <= pos - w hidden);
// 2^31 | c Llama 4's chunked attention (keys before pos's own block of c positions hidden).
bool hn_window_hides(uint w, int j, int pos) {
  if (w == 0u) return false;
  if ((w & 0x80000000u) != 0u) {
    int c = int(w & 0x7fffffffu);
    return j < pos - pos % c;
  }
  return j <= pos - int(w);
}

// Linear workgroup index over a 2-D grid (x up to 65535, then y).
uint hn_group_index() {
  return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
}

float hn_half_of(uint word, uint i) {
  vec2 v = unpackHalf2x16(word);
  return (i & 1u) == 0u ? v.x : v.y;
}

float hn_bf16_of(uint word, uint i) {
  return uintBitsToFloat((i & 1u) == 0u ? (word << 16) : (word & 0xffff0000u));
}

// Round-to-nearest-even f32 -> bf16 bits (NaN stays NaN).
uint hn_to_bf16(float f) {
  uint u = floatBitsToUint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

uint hn_to_f16(float f) {
  return packHalf2x16(vec2(f, 0.0)) & 0xffffu;
}

// f rounded to the nearest f16 value (ties to even), returned as an f32:
// |f| past the f16 range (>= 65520) becomes ±Inf, NaN stays NaN, values
// below 2^-14 land on the f16 subnormal grid (2^-24). Integer arithmetic
// only, so it is the same on every device (a conversion instruction's
// rounding mode and overflow behaviour are left to the implementation);
// converting the result to f16 (packHalf2x16, float16_t()) is then exact.
// The operand and result rounding of fp16 autocast (--precision fp16).
float hn_round_f16(float f) {
  uint u = floatBitsToUint(f), s = u & 0x80000000u, a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return f;
  if (a < 0x38800000u) return uintBitsToFloat(s | floatBitsToUint(roundEven(uintBitsToFloat(a) * 16777216.0) * (1.0 / 16777216.0)));
  uint r = (a + 0xfffu + ((a >> 13) & 1u)) & ~0x1fffu;
  return uintBitsToFloat(s | (r > 0x477fe000u ? 0x7f800000u : r));
}

// An f32 value as the f16 it is stored as (packHalf2x16 then takes it
// exactly, or rounds to nearest): mode 2 fp16 autocast's rounding (±Inf past
// the range), otherwise clamped to ±65504 (inference's f16 operands).
vec4 hn_f16_store(vec4 v, uint mode) {
  return mode == 2u ? vec4(hn_round_f16(v.x), hn_round_f16(v.y), hn_round_f16(v.z), hn_round_f16(v.w))
                    : clamp(v, -65504.0, 65504.0);
}

// Element i (absolute element index) of a buffer of `words` in dtype dt.
#define HN_LOAD(words, dt, i) \
  ((dt) == HN_DT_F32 ? uintBitsToFloat(words[(i)]) : \
   (dt) == HN_DT_F16 ? hn_half_of(words[(i) >> 1], (i)) : hn_bf16_of(words[(i) >> 1], (i)))

const float HN_NEG_INF = -1.0 / 0.0;
