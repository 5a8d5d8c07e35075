#version 450
#extension GL_GOOGLE_include_directive : require
// One frozen quantized weight W [rows, cols] (engine/tensor/quant.h has the
// layouts) dequantized to f16 [rows, cols] in the recorder's weight scratch:
// the tensor-core matmul (matmul_cm2.comp) then multiplies by it at the
// speed of a 16-bit weight. bitsandbytes runs QLoRA the same way
// (dequantize_4bit into a temporary, then the GEMM); only one matrix at a
// time exists in 16 bits, never the model. Each value is what
// matmul_quant_cm2.comp's decode functions give: NF4[code] * absmax (or the
// double-quantized absmax, or q * the row's int8 scale) rounded to f16,
// clamped to ±65504. Eight elements per invocation: one word of NF4 codes
// (two words of int8) in, four packed words out; n a multiple of 8.
#include "common.glsl"
layout(constant_id = 0) const uint QDT = 0;  // 0 = NF4, 1 = NF4 with double-quantized absmax, 2 = int8 per row
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer W { uint qw[]; };
layout(std430, binding = 1) writeonly buffer Y { uint y[]; };
layout(push_constant) uniform P {
  uint n8;     // n / 8
  uint cols;   // elements a row (int8: the row picks the scale)
  uint y_off;  // word offset of the output
  uint scale_w; uint scale2_w; uint offset_w; uint table_w;  // word offsets of the sections
} p;

const float NF4[16] = float[16](
  -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
  -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
  0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0);
shared float nf4_sh[16];  // indexed per element (a constant array would serialize)

float wf(uint word) { return uintBitsToFloat(qw[word]); }

float h(float v) { return clamp(v, -65504.0, 65504.0); }

void main() {
  if (gl_LocalInvocationID.x < 16u) nf4_sh[gl_LocalInvocationID.x] = NF4[gl_LocalInvocationID.x];
  barrier();
  uint w = hn_group_index() * 256u + gl_LocalInvocationID.x;
  if (w >= p.n8) return;
  uint i0 = w * 8u;
  if (QDT == 2u) {
    float s0 = wf(p.scale_w + i0 / p.cols);
    [[unroll]] for (uint j = 0u; j < 2u; j++) {
      uint word = qw[2u * w + j];
      float v[4];
      [[unroll]] for (uint e = 0u; e < 4u; e++) {
        uint i = i0 + 4u * j + e;
        float s = (i / p.cols == i0 / p.cols) ? s0 : wf(p.scale_w + i / p.cols);
        v[e] = h(float(bitfieldExtract(int(word), int(e * 8u), 8)) * s);
      }
      y[p.y_off + 4u * w + 2u * j] = packHalf2x16(vec2(v[0], v[1]));
      y[p.y_off + 4u * w + 2u * j + 1u] = packHalf2x16(vec2(v[2], v[3]));
    }
    return;
  }
  uint word = qw[w];
  uint b = i0 >> 6;
  float absmax;
  if (QDT == 0u) {
    absmax = wf(p.scale_w + b);
  } else {
    uint q = (qw[p.scale_w + (b >> 2)] >> ((b & 3u) * 8u)) & 255u;
    absmax = wf(p.table_w + q) * wf(p.scale2_w + (b >> 8)) + wf(p.offset_w);
  }
  [[unroll]] for (uint e = 0u; e < 4u; e++) {
    // byte e holds elements 2e (high nibble) and 2e + 1 (low)
    uint byte = (word >> (8u * e)) & 255u;
    float hi = h(nf4_sh[byte >> 4] * absmax), lo = h(nf4_sh[byte & 15u] * absmax);
    y[p.y_off + w * 4u + e] = packHalf2x16(vec2(hi, lo));
  }
}
