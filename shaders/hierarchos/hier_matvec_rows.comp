#version 450
#extension GL_GOOGLE_include_directive : require
// hier_matvec.comp (trans 0) for up to 16 batch rows per workgroup, W read
// once for all of them (hier_mv_rows.glsl): the recorder's choice for a
// Linear over several rows (flags bit 2, the row count in flags >> 8).
#include "hier.glsl"
#include "hier_mv.glsl"
#include "hier_mv_finish.glsl"
#include "hier_mv_rows.glsl"

void main() {
  hier_mv_rows_run();
}
