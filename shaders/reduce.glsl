// Workgroup-wide reductions for 256-invocation workgroups (shared-memory tree;
// every invocation must call them, in uniform control flow).
shared float hn_red[256];
float hn_wg_sum(float v) {
  uint t = gl_LocalInvocationID.x;
  hn_red[t] = v;
  barrier();
  [[unroll]] for (uint s = 128u; s > 0u; s >>= 1) {
    if (t < s) hn_red[t] += hn_red[t + s];
    barrier();
  }
  float r = hn_red[0];
  barrier();
  return r;
}
float hn_wg_max(float v) {
  uint t = gl_LocalInvocationID.x;
  hn_red[t] = v;
  barrier();
  [[unroll]] for (uint s = 128u; s > 0u; s >>= 1) {
    if (t < s) hn_red[t] = max(hn_red[t], hn_red[t + s]);
    barrier();
  }
  float r = hn_red[0];
  barrier();
  return r;
}
