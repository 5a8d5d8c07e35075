#version 450
#extension GL_GOOGLE_include_directive : require
// New keys and values into f32 caches: rows row0..row0+T of kc [n_ctx, Wk]
// and vc [n_ctx, Wv] get k [T, Wk] and v [T, Wv], both in one dispatch
// (invocation (t, c) for c < max(Wk, Wv)). dyn = 1: row0 is read from binding 4
// (a replayed decode step); rows at or past n_ctx are dropped.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Ks { float ks[]; };
layout(std430, binding = 1) readonly buffer Vs { float vs[]; };
layout(std430, binding = 2) writeonly buffer Kc { float kc[]; };
layout(std430, binding = 3) writeonly buffer Vc { float vc[]; };
layout(std430, binding = 4) readonly buffer Dyn { int dyn[]; };
layout(push_constant) uniform P {
  uint n; uint W; uint n_ctx; uint row0; uint dyn; uint dyn_off; uint k_off; uint v_off; uint kc_off; uint vc_off;
  uint Wk; uint Wv;
} p;

void main() {
  uint i = hn_group_index() * 256u + gl_LocalInvocationID.x;
  if (i >= p.n) return;
  uint t = i / p.W, c = i % p.W;
  int row0 = p.dyn != 0u ? dyn[p.dyn_off] : int(p.row0);
  int row = row0 + int(t);
  if (row < 0 || row >= int(p.n_ctx)) return;
  if (c < p.Wk) kc[p.kc_off + uint(row) * p.Wk + c] = ks[p.k_off + t * p.Wk + c];
  if (c < p.Wv) vc[p.vc_off + uint(row) * p.Wv + c] = vs[p.v_off + t * p.Wv + c];
}
