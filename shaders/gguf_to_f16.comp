#version 450
#extension GL_GOOGLE_include_directive : require
// A frozen weight W [rows, cols] in ggml blocks (GT, shaders/gguf_dequant.glsl)
// dequantized to f16 [rows, cols] in the recorder's weight scratch: W's f16
// form, which the 16-bit weights' tensor-core matmul (matmul_cm2.comp) then
// multiplies by (quant_to_f16.comp does the same for NF4 and int8; only one
// matrix at a time exists in 16 bits). Each invocation decodes one 32-element
// unit of a row (gg_unit: ggml's dequantize_row_* arithmetic in f32, the
// block's scales once) and rounds to f16 (clamped to ±65504); the workgroup's
// 256 units (4096 words, contiguous in Y) go through shared memory so that the
// stores are coalesced (an invocation's own 16 words would be 64-byte strided
// across the subgroup: on the H200 that ran at a tenth of the bandwidth).
// Q4_K, Q6_K and Q8_0 take gguf_to_f16_wide.comp instead unless
// HN_GGUF_TO_F16_OLD=1 (engine/tensor/ops-gguf.c).
#include "common.glsl"
layout(constant_id = 0) const uint GT = 0;
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer W { uint qw[]; };
layout(std430, binding = 1) writeonly buffer Y { uint y[]; };
layout(push_constant) uniform P {
  uint units;      // rows * cols / 32
  uint upr;        // units a row: cols / 32
  uint row_bytes;
  uint y_off;      // word offset of the output
} p;

uint gg_word(uint which, uint i) { return qw[i]; }
#include "gguf_dequant.glsl"

shared uint sh[256u * 17u];  // [unit][word], a row of 17 so that the writes hit distinct banks

void main() {
  uint t = gl_LocalInvocationID.x, u0 = hn_group_index() * 256u, u = u0 + t;
  if (u < p.units) {
    uint r = u / p.upr, c = u % p.upr;
    float w[32];
    gg_unit(0u, r * p.row_bytes, c, w);
    [[unroll]] for (uint i = 0u; i < 16u; i++)
      sh[17u * t + i] = packHalf2x16(clamp(vec2(w[2u * i], w[2u * i + 1u]), vec2(-65504.0), vec2(65504.0)));
  }
  barrier();
  // rows are whole units: element r * cols + 32 c = 32 u, word 16 u
  uint words = 16u * min(256u, p.units - u0);
  [[unroll]] for (uint j = 0u; j < 16u; j++) {
    uint wi = t + 256u * j;
    if (wi < words) y[p.y_off + 16u * u0 + wi] = sh[17u * (wi >> 4) + (wi & 15u)];
  }
}
