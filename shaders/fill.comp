#version 450
// Fills a float buffer with a constant: the smallest op, used to test the core.
layout(local_size_x = 256) in;
layout(std430, binding = 0) writeonly buffer Out { float y[]; };
layout(push_constant) uniform P { uint n; float value; } p;
void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i < p.n) y[i] = p.value;
}
