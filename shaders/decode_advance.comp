#version 450
#extension GL_GOOGLE_include_directive : require
// End of a replayed greedy decode step: state (i32) = [0] the token just
// picked (the next step's input), [1] position, [2] cache row, [3] tokens
// produced, [4 .. 4 + cap) the produced tokens. Appends the pick and moves
// position and row on by one.
layout(local_size_x = 1) in;
layout(std430, binding = 0) buffer S { int st[]; };
layout(push_constant) uniform P { uint off; uint cap; } p;

void main() {
  int n = st[p.off + 3u];
  if (uint(n) < p.cap) st[p.off + 4u + uint(n)] = st[p.off];
  st[p.off + 3u] = n + 1;
  st[p.off + 1u] += 1;
  st[p.off + 2u] += 1;
}
