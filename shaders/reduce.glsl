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

#ifdef HN_SUBGROUP_REDUCE
// With SGRED (a specialization constant of the including shader, which also
// enables GL_KHR_shader_subgroup_arithmetic): subgroup sums, then every
// invocation adds the subgroups' sums in subgroup order (two barriers where
// the tree waits on nine; the same result in every invocation, and from run
// to run). Subgroups of at least 4 invocations.
shared float hn_red_sg[64];
float hn_wg_sum_sg(float v) {
  if (SGRED == 0u) return hn_wg_sum(v);
  float s = subgroupAdd(v);
  if (subgroupElect()) hn_red_sg[gl_SubgroupID] = s;
  barrier();
  float r = 0.0;
  for (uint i = 0u; i < gl_NumSubgroups; i++) r += hn_red_sg[i];
  barrier();
  return r;
}
#endif
