/* Backward ops and optimizer updates (see ops-back.h). */
#include "tensor/ops-back.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/ops-private.h"

static gboolean
check_f32 (const char *op, const char *role, HnCmd *cmd, HnTensor *t, GError **error)
{
  if (!t)
    return TRUE;
  return hn_op_check_ctx (op, cmd, t, error) && hn_op_check_dtype (op, role, t, HN_DTYPE_F32, error);
}

/* check_f32, or an f16 t where f16_ok (a 16-bit input or output the op takes too). */
static gboolean
check_f32_or_f16 (const char *op, const char *role, HnCmd *cmd, HnTensor *t, gboolean f16_ok, GError **error)
{
  if (t && f16_ok && t->dtype == HN_DTYPE_F16)
    return hn_op_check_ctx (op, cmd, t, error);
  return check_f32 (op, role, cmd, t, error);
}

static gboolean
fail_shape (const char *op, HnTensor *a, HnTensor *b, const char *what, GError **error)
{
  g_autofree char *da = hn_tensor_describe (a), *db = hn_tensor_describe (b);
  g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: %s %s and %s %s: %s", op, a->name, da, b->name, db,
               what);
  return FALSE;
}

/* Scratch may be larger than needed (one buffer serves several shapes). */
static gboolean
check_at_least (const char *op, const char *role, HnTensor *t, gint64 n, GError **error)
{
  if (t->n < n)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: %s %s has %" G_GINT64_FORMAT
                   " elements, %" G_GINT64_FORMAT " needed", op, role, t->name, t->n, n);
      return FALSE;
    }
  return TRUE;
}

/* A 2-D [rows, cols] view of t (same storage). */
static HnTensor *
as_2d (HnTensor *t, GError **error)
{
  return hn_tensor_reshape (t, 2, (gint64[]) { hn_tensor_rows (t), hn_tensor_cols (t) }, error);
}

gboolean
hn_op_matmul_back (HnCmd *cmd, HnTensor *dx, HnTensor *dw, HnTensor *db, HnTensor *dy, HnTensor *x, HnTensor *w,
                   HnBackFlags flags, GError **error)
{
  const char *op = "matmul_back";
  if (!check_f32 (op, "dy", cmd, dy, error) || !check_f32 (op, "x", cmd, x, error) ||
      !check_f32 (op, "dx", cmd, dx, error) || !check_f32 (op, "dw", cmd, dw, error) ||
      !check_f32 (op, "db", cmd, db, error) || !hn_op_check_ctx (op, cmd, w, error))
    return FALSE;
  gint64 M = hn_tensor_rows (dy), N = hn_tensor_cols (dy), K = hn_tensor_cols (x);
  if (hn_tensor_rows (x) != M)
    return fail_shape (op, dy, x, "row counts differ", error);
  if (w && (w->ndim != 2 || w->shape[0] != N || w->shape[1] != K))
    return fail_shape (op, dy, w, "weight must be [N, K]", error);
  g_autoptr (HnTensor) dy2 = as_2d (dy, error);
  if (!dy2)
    return FALSE;
  if (dx)
    {
      if (!w)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: dx needs the weight", op);
          return FALSE;
        }
      if (hn_tensor_rows (dx) != M || hn_tensor_cols (dx) != K)
        return fail_shape (op, dx, x, "dx must have x's shape", error);
      g_autoptr (HnTensor) dx2 = as_2d (dx, error);
      if (!dx2 || !hn_op_bmm (cmd, dx2, dy2, w, (flags & HN_BACK_ACCUMULATE) ? HN_MATMUL_ACCUMULATE : 0, 1.0f, error))
        return FALSE;
    }
  if (dw)
    {
      if (dw->n != N * K)
        return fail_shape (op, dw, dy, "dw must be [N, K]", error);
      g_autoptr (HnTensor) x2 = as_2d (x, error);
      g_autoptr (HnTensor) dw2 = x2 ? hn_tensor_reshape (dw, 2, (gint64[]) { N, K }, error) : NULL;
      if (!dw2 || !hn_op_bmm (cmd, dw2, dy2, x2, HN_MATMUL_TRANS_A | HN_MATMUL_ACCUMULATE, 1.0f, error))
        return FALSE;
    }
  if (db && !hn_op_bias_back (cmd, db, dy, error))
    return FALSE;
  return TRUE;
}

/* Column sums of the parameter gradients in two passes (norm_back_params.comp
 * over chunks of NORM_PARAMS_ROWS rows into the recorder's scratch, then
 * norm_back_params_sum.comp adding the chunks in order): every workgroup of
 * the first pass reads whole rows, and the chunks fill the GPU however few
 * the columns are. round_db: db gets its sum rounded to f16 (a Linear's bias
 * gradient under fp16 autocast, which PyTorch computes in f16) */
#define NORM_PARAMS_ROWS 64u

/* The second pass: dw / db (flags 1 / 2, 4 rounds db's sum to f16) += the
 * chunks' partial sums in the scratch s, in order (norm_back_params_sum.comp). */
/* The chunking of the two-pass column sums over rows of cols columns: R rows
 * a chunk (whole rows, at most 65535 chunks), and the scratch of their partial
 * sums (the dw slots, then the db slots). NULL on a failed allocation. */
static HnVkBuffer *
params_chunks (HnCmd *cmd, guint32 rows, guint32 cols, guint32 *R, guint32 *chunks, guint64 *bytes, GError **error)
{
  *R = MAX (NORM_PARAMS_ROWS, (rows + 65534) / 65535);
  *chunks = MAX ((rows + *R - 1) / *R, 1);
  *bytes = (guint64) 2 * *chunks * cols * sizeof (float);
  return hn_cmd_scratch (cmd, *bytes, error);
}

static gboolean
params_sum (HnCmd *cmd, HnVkBuffer *s, guint64 bytes, guint32 cols, guint32 chunks, HnTensor *dw, HnTensor *db,
            guint32 flags, GError **error)
{
  HnTensor *any = dw ? dw : db;
  struct { guint32 cols, chunks, part_off, dw_off, db_off, flags; } sp = {
    cols, chunks, 0, dw ? hn_eoff (dw) : 0, db ? hn_eoff (db) : 0, flags };
  HnVkBinding sb[3] = { { s, 0, bytes, FALSE }, hn_bind (dw ? dw : any, TRUE), hn_bind (db ? db : any, TRUE) };
  guint32 gx, gy;
  hn_grid ((cols + 63) / 64, &gx, &gy);
  return hn_cmd_dispatch (cmd, "norm_back_params_sum", NULL, 0, sb, 3, &sp, sizeof sp, gx, gy, 1, error);
}

static gboolean
norm_params_back (HnCmd *cmd, HnTensor *dw, HnTensor *db, HnTensor *dy, HnTensor *x, HnTensor *stats,
                  gboolean round_db, GError **error)
{
  guint32 rows = (guint32) hn_tensor_rows (dy), cols = (guint32) hn_tensor_cols (dy), R, chunks;
  guint32 flags = (dw ? 1u : 0u) | (db ? 2u : 0u) | (round_db ? 4u : 0u);
  guint64 bytes;
  HnVkBuffer *s = params_chunks (cmd, rows, cols, &R, &chunks, &bytes, error);
  if (!s)
    return FALSE;
  struct { guint32 rows, cols, dy_off, x_off, st_off, part_off, R, flags; } pc = {
    rows, cols, hn_eoff (dy), x ? hn_eoff (x) : 0, stats ? hn_eoff (stats) : 0, 0, R, flags };
  HnVkBinding bd[4] = { hn_bind (dy, FALSE), hn_bind (x ? x : dy, FALSE), hn_bind (stats ? stats : dy, FALSE),
                        { s, 0, bytes, TRUE } };
  gboolean ok = hn_cmd_dispatch (cmd, "norm_back_params", NULL, 0, bd, 4, &pc, sizeof pc, (cols + 255) / 256, chunks, 1,
                                 error);
  return ok && params_sum (cmd, s, bytes, cols, chunks, dw, db, flags, error);
}

/* dy's f16 copy (dy16, [rows, cols] from an even element) and db += Σ_rows dy
 * rounded to f16, from one read of dy (bias_back_f16.comp, then the chunks'
 * sum as norm_params_back adds them: the same bits as hn_op_cast_f16 and
 * hn_op_bias_back under fp16 autocast). Even cols and offsets only. With
 * act_x (same shape as dy, even offset), dy·act'(act_x) in place of dy, as
 * hn_op_unary_back forms it; db may then be NULL. */
static gboolean
cast_f16_bias_back_ld (HnCmd *cmd, HnTensor *dy16, gint64 c0, gint64 ld, HnTensor *db, HnTensor *dy, HnTensor *act_x,
                       HnActivation act, GError **error)
{
  guint32 rows = (guint32) hn_tensor_rows (dy), cols = (guint32) hn_tensor_cols (dy), R, chunks;
  guint64 bytes;
  HnVkBuffer *s = params_chunks (cmd, rows, cols, &R, &chunks, &bytes, error);
  if (!s)
    return FALSE;
  struct { guint32 rows, cols, dy_off, y_off, part_off, R, x_off, y_ld; } pc = {
    rows, cols, hn_eoff (dy), hn_eoff (dy16) + (guint32) c0, 0, R, act_x ? hn_eoff (act_x) : 0, (guint32) ld };
  HnVkBinding bd[4] = { hn_bind (dy, FALSE), hn_bind (dy16, TRUE), { s, 0, bytes, TRUE },
                        hn_bind (act_x ? act_x : dy, FALSE) };
  guint32 spec[4] = { act_x != NULL, (guint32) act, act_x && act_x->dtype == HN_DTYPE_F16, dy->dtype == HN_DTYPE_F16 };
  hn_cmd_set_label (cmd, act_x ? "act_back_bias_f16" : "bias_back_f16");
  gboolean ok = hn_cmd_dispatch (cmd, "bias_back_f16", spec, 4, bd, 4, &pc, sizeof pc, (cols + 511) / 512, chunks, 1,
                                 error);
  hn_cmd_set_label (cmd, NULL);
  return ok && (!db || params_sum (cmd, s, bytes, cols, chunks, NULL, db, 2u | 4u, error));
}

static gboolean
cast_f16_bias_back (HnCmd *cmd, HnTensor *dy16, HnTensor *db, HnTensor *dy, HnTensor *act_x, HnActivation act,
                    GError **error)
{
  return cast_f16_bias_back_ld (cmd, dy16, 0, hn_tensor_cols (dy), db, dy, act_x, act, error);
}

gboolean
hn_op_bias_back (HnCmd *cmd, HnTensor *db, HnTensor *dy, GError **error)
{
  const char *op = "bias_back";
  if (!check_f32 (op, "db", cmd, db, error) || !check_f32 (op, "dy", cmd, dy, error) ||
      !hn_op_check_count (op, "db", db, hn_tensor_cols (dy), error))
    return FALSE;
  return norm_params_back (cmd, NULL, db, dy, NULL, NULL, hn_op_matmul_f16 (cmd, 0), error);
}

static gboolean
norm_back (const char *op, HnCmd *cmd, HnTensor *dx, HnTensor *dw, HnTensor *db, HnTensor *dy, HnTensor *x,
           HnTensor *w, HnTensor *stats, float eps, guint32 shader_flags, HnBackFlags flags, GError **error)
{
  gint64 rows = hn_tensor_rows (x), cols = hn_tensor_cols (x);
  if (!check_f32 (op, "dy", cmd, dy, error) || !check_f32 (op, "x", cmd, x, error) ||
      !check_f32 (op, "dx", cmd, dx, error) || !check_f32 (op, "w", cmd, w, error) ||
      !check_f32 (op, "dw", cmd, dw, error) || !check_f32 (op, "db", cmd, db, error) ||
      !check_f32 (op, "stats", cmd, stats, error) || !check_at_least (op, "stats", stats, 2 * rows, error) ||
      !hn_op_check_count (op, "dy", dy, x->n, error) || (dx && !hn_op_check_count (op, "dx", dx, x->n, error)) ||
      (w && !hn_op_check_count (op, "w", w, cols, error)) || (dw && !hn_op_check_count (op, "dw", dw, cols, error)) ||
      (db && !hn_op_check_count (op, "db", db, cols, error)))
    return FALSE;
  if (dw && !w)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: dw without a weight", op);
      return FALSE;
    }
  /* The x pass always runs: it writes the stats the parameter pass reads. */
  HnTensor *dxt = dx ? dx : NULL;
  struct { guint32 rows, cols, dy_off, x_off, w_off, dx_off, st_off; float eps; guint32 flags; } pc = {
    (guint32) rows, (guint32) cols, hn_eoff (dy), hn_eoff (x), w ? hn_eoff (w) : 0, dxt ? hn_eoff (dxt) : 0,
    hn_eoff (stats), eps,
    shader_flags | (w ? 8u : 0u) | ((flags & HN_BACK_ACCUMULATE) ? 32u : 0u) };
  if (!dxt)
    {
      /* No dx wanted: still need the stats; write dx into nothing is not
       * possible, so the caller must pass dx. */
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: dx is required", op);
      return FALSE;
    }
  HnVkBinding bd[5] = { hn_bind (dy, FALSE), hn_bind (x, FALSE), hn_bind (w ? w : x, FALSE), hn_bind (dxt, TRUE),
                        hn_bind (stats, TRUE) };
  guint32 sgred = hn_op_norm_sg_reduce (cmd);
  if (!hn_op_dispatch_rows (cmd, "norm_back", &sgred, 1, bd, 5, &pc, sizeof pc, rows, error))
    return FALSE;
  if (dw || db)
    return norm_params_back (cmd, dw, db, dy, x, stats, FALSE, error);
  return TRUE;
}

gboolean
hn_op_rmsnorm_back (HnCmd *cmd, HnTensor *dx, HnTensor *dw, HnTensor *dy, HnTensor *x, HnTensor *w,
                    HnTensor *stats, float eps, HnNormFlags norm_flags, HnBackFlags flags, GError **error)
{
  if (norm_flags & (HN_NORM_ROUND_BF16 | HN_NORM_ROUND_F16))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "rmsnorm_back: rounded (bf16/f16) norms are not supported");
      return FALSE;
    }
  return norm_back ("rmsnorm_back", cmd, dx, dw, NULL, dy, x, w, stats, eps,
                    (norm_flags & HN_NORM_WEIGHT_PLUS_ONE) ? 1u : 0u, flags, error);
}

gboolean
hn_op_layernorm_back (HnCmd *cmd, HnTensor *dx, HnTensor *dw, HnTensor *db, HnTensor *dy, HnTensor *x,
                      HnTensor *w, HnTensor *stats, float eps, HnBackFlags flags, GError **error)
{
  return norm_back ("layernorm_back", cmd, dx, dw, db, dy, x, w, stats, eps, 16u, flags, error);
}

gboolean
hn_op_unary_back (HnCmd *cmd, HnTensor *dx, HnTensor *dy, HnTensor *x, HnActivation act, HnBackFlags flags,
                  GError **error)
{
  const char *op = "unary_back";
  if (!check_f32 (op, "dx", cmd, dx, error) || !check_f32 (op, "dy", cmd, dy, error) ||
      !check_f32 (op, "x", cmd, x, error) || !hn_op_check_count (op, "dy", dy, x->n, error) ||
      !hn_op_check_count (op, "dx", dx, x->n, error))
    return FALSE;
  struct { guint32 n, dy_off, x_off, dx_off, act, flags; } pc = {
    (guint32) x->n, hn_eoff (dy), hn_eoff (x), hn_eoff (dx), (guint32) act, (flags & HN_BACK_ACCUMULATE) ? 1u : 0u };
  HnVkBinding bd[3] = { hn_bind (dy, FALSE), hn_bind (x, FALSE), hn_bind (dx, TRUE) };
  return hn_op_dispatch_elems (cmd, "unary_back", NULL, 0, bd, 3, &pc, sizeof pc, (guint64) x->n, error);
}

gboolean
hn_op_glu_back (HnCmd *cmd, HnTensor *dgate, HnTensor *dup, HnTensor *dy, HnTensor *gate, HnTensor *up,
                HnActivation act, GError **error)
{
  const char *op = "glu_back";
  gboolean out16 = dgate && dgate->dtype == HN_DTYPE_F16;
  if (out16 && (!up || !dup))
    return fail_shape (op, dgate, gate, "f16 gradients need separate gate and up", error);
  if ((out16 ? !hn_op_check_ctx (op, cmd, dgate, error) || !hn_op_check_ctx (op, cmd, dup, error) ||
                   !hn_op_check_dtype (op, "dup", dup, HN_DTYPE_F16, error)
             : !check_f32 (op, "dgate", cmd, dgate, error) || !check_f32 (op, "dup", cmd, dup, error)) ||
      !check_f32 (op, "dy", cmd, dy, error) || !check_f32 (op, "gate", cmd, gate, error) ||
      !check_f32 (op, "up", cmd, up, error))
    return FALSE;
  gint64 F = hn_tensor_cols (dy), rows = hn_tensor_rows (dy);
  gint64 stride = up ? F : 2 * F;
  if (!dgate || (up && !dup) || (!up && dup) || hn_tensor_cols (gate) != stride || hn_tensor_rows (gate) != rows ||
      dgate->n != gate->n || (up && (up->n != rows * F || dup->n != rows * F)))
    return fail_shape (op, dy, gate, "gate/up and their gradients must fit dy (fused gate_up: twice its width)",
                       error);
  HnTensor *u = up ? up : gate, *du = up ? dup : dgate;
  struct { guint32 n, F, dy_off, g_off, u_off, dg_off, du_off, g_stride, act; } pc = {
    (guint32) (rows * F), (guint32) F, hn_eoff (dy), hn_eoff (gate), hn_eoff (u) + (up ? 0u : (guint32) F),
    hn_eoff (dgate), hn_eoff (du) + (up ? 0u : (guint32) F), (guint32) stride, (guint32) act };
  HnVkBinding bd[5] = { hn_bind (dy, FALSE), hn_bind (gate, FALSE), hn_bind (u, FALSE), hn_bind (dgate, TRUE),
                        hn_bind (du, TRUE) };
  /* four elements per invocation when every row and offset allows 16-byte accesses */
  guint32 vec = F % 4 == 0 && pc.dy_off % 4 == 0 && pc.g_off % 4 == 0 && pc.u_off % 4 == 0 && pc.dg_off % 4 == 0 &&
                pc.du_off % 4 == 0;
  if (out16 && !vec)
    return fail_shape (op, dgate, gate, "f16 gradients need F % 4 == 0 and 4-element offsets", error);
  if (vec)
    pc.n /= 4;
  guint32 spec[2] = { vec, out16 };
  return hn_op_dispatch_elems (cmd, "glu_back", spec, 2, bd, 5, &pc, sizeof pc, (guint64) pc.n, error);
}

gboolean
hn_op_embedding_back (HnCmd *cmd, HnTensor *dtable, HnTensor *dy, HnTensor *ids, GError **error)
{
  const char *op = "embedding_back";
  if (!check_f32 (op, "dtable", cmd, dtable, error) || !check_f32 (op, "dy", cmd, dy, error) ||
      !hn_op_check_ctx (op, cmd, ids, error) || !hn_op_check_dtype (op, "ids", ids, HN_DTYPE_I32, error))
    return FALSE;
  gint64 D = hn_tensor_cols (dtable), V = hn_tensor_rows (dtable);
  if (hn_tensor_cols (dy) != D || hn_tensor_rows (dy) != ids->n)
    return fail_shape (op, dy, dtable, "dy must be [n_ids, D]", error);
  struct { guint32 n, D, V, dy_off, id_off, dt_off; } pc = {
    (guint32) ids->n, (guint32) D, (guint32) V, hn_eoff (dy), hn_eoff (ids), hn_eoff (dtable) };
  HnVkBinding bd[3] = { hn_bind (dy, FALSE), hn_bind (ids, FALSE), hn_bind (dtable, TRUE) };
  guint32 gx, gy;
  hn_grid ((D + 63) / 64, &gx, &gy);
  return hn_cmd_dispatch (cmd, "embedding_back", NULL, 0, bd, 3, &pc, sizeof pc, gx, gy, 1, error);
}

static int
cmp_u64 (const void *a, const void *b)
{
  guint64 x = *(const guint64 *) a, y = *(const guint64 *) b;
  return x < y ? -1 : x > y;
}

guint
hn_embedding_groups (const gint32 *ids, gint64 n, gint64 V, gint32 *out)
{
  g_autofree guint64 *key = g_new (guint64, MAX (n, 1));
  gint64 T = 0;
  for (gint64 i = 0; i < n; i++)
    if (ids[i] >= 0 && ids[i] < V)
      key[T++] = (guint64) ids[i] << 32 | (guint64) i;
  qsort (key, (gsize) T, sizeof *key, cmp_u64);
  guint G = 0;
  for (gint64 j = 0; j < T; j++)
    if (j == 0 || key[j] >> 32 != key[j - 1] >> 32)
      G++;
  out[0] = (gint32) G;
  gint32 *starts = out + 1, *gid = out + n + 2, *tok = out + 2 * n + 2;
  guint k = 0;
  for (gint64 j = 0; j < T; j++)
    {
      if (j == 0 || key[j] >> 32 != key[j - 1] >> 32)
        {
          starts[k] = (gint32) j;
          gid[k++] = (gint32) (key[j] >> 32);
        }
      tok[j] = (gint32) (key[j] & 0xffffffffu);
    }
  starts[G] = (gint32) T;
  return G;
}

gboolean
hn_op_embedding_back_grouped (HnCmd *cmd, HnTensor *dtable, HnTensor *dy, HnTensor *groups, GError **error)
{
  const char *op = "embedding_back_grouped";
  if (!check_f32 (op, "dtable", cmd, dtable, error) || !check_f32 (op, "dy", cmd, dy, error) ||
      !hn_op_check_ctx (op, cmd, groups, error) || !hn_op_check_dtype (op, "groups", groups, HN_DTYPE_I32, error))
    return FALSE;
  gint64 D = hn_tensor_cols (dtable), n = hn_tensor_rows (dy);
  if (hn_tensor_cols (dy) != D)
    return fail_shape (op, dy, dtable, "dy must be [n, D]", error);
  if (groups->n < HN_EMBEDDING_GROUPS_LEN (n))
    return fail_shape (op, groups, dy, "groups must hold hn_embedding_groups' output for dy's rows", error);
  if (n == 0)
    return TRUE;
  /* up to one group per row: the workgroups past G return at once */
  struct { guint32 n, D, dy_off, g_off, dt_off; } pc = {
    (guint32) n, (guint32) D, hn_eoff (dy), hn_eoff (groups), hn_eoff (dtable) };
  HnVkBinding bd[3] = { hn_bind (dy, FALSE), hn_bind (groups, FALSE), hn_bind (dtable, TRUE) };
  guint32 gx, gy;
  hn_grid ((guint) n, &gx, &gy);
  return hn_cmd_dispatch (cmd, "embedding_back_grouped", NULL, 0, bd, 3, &pc, sizeof pc, gx, gy, 1, error);
}

gboolean
hn_op_cross_entropy_back (HnCmd *cmd, HnTensor *dlogits, HnTensor *logits, HnTensor *targets, HnTensor *row_scale,
                          GError **error)
{
  const char *op = "cross_entropy_back";
  gint64 N = hn_tensor_rows (logits), V = hn_tensor_cols (logits);
  if (!check_f32 (op, "dlogits", cmd, dlogits, error) || !check_f32 (op, "logits", cmd, logits, error) ||
      !check_f32 (op, "row_scale", cmd, row_scale, error) || !hn_op_check_ctx (op, cmd, targets, error) ||
      !hn_op_check_dtype (op, "targets", targets, HN_DTYPE_I32, error) ||
      !hn_op_check_count (op, "targets", targets, N, error) ||
      !hn_op_check_count (op, "row_scale", row_scale, N, error) ||
      !hn_op_check_count (op, "dlogits", dlogits, logits->n, error))
    return FALSE;
  if (dlogits->buf == logits->buf && dlogits->offset != logits->offset &&
      dlogits->offset < logits->offset + hn_tensor_nbytes (logits) &&
      logits->offset < dlogits->offset + hn_tensor_nbytes (dlogits))
    return fail_shape (op, dlogits, logits, "partly overlapping (in place must be exact)", error);
  struct { guint32 rows, V, l_off, t_off, s_off, d_off; } pc = {
    (guint32) N, (guint32) V, hn_eoff (logits), hn_eoff (targets), hn_eoff (row_scale), hn_eoff (dlogits) };
  HnVkBinding bd[4] = { hn_bind (logits, dlogits->buf == logits->buf), hn_bind (targets, FALSE),
                        hn_bind (row_scale, FALSE), hn_bind (dlogits, TRUE) };
  return hn_op_dispatch_rows (cmd, "cross_entropy_back", NULL, 0, bd, 4, &pc, sizeof pc, (guint64) N, error);
}

gboolean
hn_op_cross_entropy_grad (HnCmd *cmd, HnTensor *loss, HnTensor *dlogits, HnTensor *logits, HnTensor *targets,
                          HnTensor *row_scale, gint32 ignore_index, GError **error)
{
  const char *op = "cross_entropy_grad";
  gint64 N = hn_tensor_rows (logits), V = hn_tensor_cols (logits);
  gboolean f16 = dlogits && dlogits->dtype == HN_DTYPE_F16;
  gboolean x16 = logits && logits->dtype == HN_DTYPE_F16;
  if (!check_f32_or_f16 (op, "logits", cmd, logits, TRUE, error) || !check_f32 (op, "row_scale", cmd, row_scale, error) ||
      !check_f32 (op, "loss", cmd, loss, error) || !hn_op_check_ctx (op, cmd, targets, error) ||
      !check_f32_or_f16 (op, "dlogits", cmd, dlogits, TRUE, error) ||
      !hn_op_check_dtype (op, "targets", targets, HN_DTYPE_I32, error) ||
      !hn_op_check_count (op, "targets", targets, N, error) ||
      !hn_op_check_count (op, "row_scale", row_scale, N, error) || !hn_op_check_count (op, "loss", loss, N, error) ||
      !hn_op_check_count (op, "dlogits", dlogits, logits->n, error))
    return FALSE;
  if (dlogits->buf == logits->buf && (f16 || x16 || dlogits->offset != logits->offset) &&
      dlogits->offset < logits->offset + hn_tensor_nbytes (logits) &&
      logits->offset < dlogits->offset + hn_tensor_nbytes (dlogits))
    return fail_shape (op, dlogits, logits, "overlapping (in place must be exact and f32)", error);
  guint32 vec = V % 4 == 0 && hn_eoff (logits) % 4 == 0 && hn_eoff (dlogits) % 4 == 0;
  if ((f16 || x16) && !vec)
    return fail_shape (op, dlogits, logits, "f16 logits or dlogits need V % 4 == 0 and offsets on 4 elements", error);
  struct { guint32 rows, V, x_off, t_off, s_off, l_off, d_off; gint32 ignore; } pc = {
    (guint32) N, (guint32) V, hn_eoff (logits), hn_eoff (targets), hn_eoff (row_scale), hn_eoff (loss),
    hn_eoff (dlogits), ignore_index };
  /* under fp16 autocast an f16 gradient is rounded as autocast rounds (±Inf past the range) */
  guint32 spec[3] = { vec, f16 ? hn_op_f16_rounding (cmd) : 0u, x16 };
  HnVkBinding bd[5] = { hn_bind (logits, dlogits->buf == logits->buf), hn_bind (targets, FALSE),
                        hn_bind (row_scale, FALSE), hn_bind (loss, TRUE), hn_bind (dlogits, TRUE) };
  return hn_op_dispatch_rows (cmd, "cross_entropy_grad", spec, 3, bd, 5, &pc, sizeof pc, (guint64) N, error);
}

gboolean
hn_op_rope_back (HnCmd *cmd, HnTensor *dx, HnTensor *dy, HnTensor *neg_positions, HnTensor *inv_freq, int rot_dims,
                 HnRopeStyle style, float attn_scale, GError **error)
{
  return hn_op_rope (cmd, dx, dy, neg_positions, inv_freq, rot_dims, style, attn_scale, error);
}

gboolean
hn_op_attention_back (HnCmd *cmd, HnTensor *dq, HnTensor *dk, HnTensor *dv, HnTensor *dout, HnTensor *q, HnTensor *k,
                      HnTensor *v, HnTensor *stats, const HnAttentionParams *params, HnBackFlags flags,
                      GError **error)
{
  const char *op = "attention_back";
  static const HnAttentionParams defaults = { 0 };
  if (!params)
    params = &defaults;
  if (!check_f32 (op, "dq", cmd, dq, error) || !check_f32 (op, "dk", cmd, dk, error) ||
      !check_f32 (op, "dv", cmd, dv, error) || !check_f32 (op, "dout", cmd, dout, error) ||
      !check_f32 (op, "q", cmd, q, error) || !check_f32 (op, "k", cmd, k, error) || !check_f32 (op, "v", cmd, v, error) ||
      !check_f32 (op, "stats", cmd, stats, error) || !check_f32 (op, "alibi_slopes", cmd, params->alibi_slopes, error))
    return FALSE;
  if (params->mask || params->sinks || params->local_chunk)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: %s not supported in training", op,
                   params->mask    ? "an additive mask is"
                   : params->sinks ? "attention sinks are"
                                   : "chunked attention (local_chunk) is");
      return FALSE;
    }
  if (!dq || !dk || !dv)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: dq, dk and dv are required", op);
      return FALSE;
    }
  gboolean batched = q->ndim == 4;
  int o = batched ? 1 : 0;
  if ((q->ndim != 3 && q->ndim != 4) || k->ndim != q->ndim || v->ndim != q->ndim || dout->ndim != q->ndim)
    return fail_shape (op, q, k, "q, k, v and dout must be [B,] T, H, D", error);
  gint64 B = batched ? q->shape[0] : 1;
  gint64 T = q->shape[o], H = q->shape[o + 1], D = q->shape[o + 2];
  gint64 S = k->shape[o], KVH = k->shape[o + 1], Dv = v->shape[o + 2];
  if ((batched && (k->shape[0] != B || v->shape[0] != B || dout->shape[0] != B)) || k->shape[o + 2] != D ||
      v->shape[o] != S || v->shape[o + 1] != KVH || dout->n != B * T * H * Dv || H % KVH != 0 ||
      dq->n != q->n || dk->n != k->n || dv->n != v->n || (params->n_kv > 0 && params->n_kv != S))
    return fail_shape (op, q, k, "shapes do not fit (heads must be a multiple of KV heads; n_kv must be all of k)",
                       error);
  if (!check_at_least (op, "stats", stats, 2 * B * T * H, error) ||
      (params->alibi_slopes && !hn_op_check_count (op, "alibi_slopes", params->alibi_slopes, H, error)))
    return FALSE;
  float scale = params->scale != 0.0f ? params->scale : 1.0f / sqrtf ((float) D);
  struct {
    guint32 B, T, H, KVH, D, Dv, S;
    gint32 pos0;
    guint32 window, causal;
    float scale, softcap;
    guint32 q_off, k_off, v_off, do_off, s_off, st_off, g_off, g2_off, flags;
  } pc = { (guint32) B, (guint32) T, (guint32) H, (guint32) KVH, (guint32) D, (guint32) Dv, (guint32) S,
           (gint32) params->pos0, (guint32) params->window, params->causal ? 1u : 0u, scale, params->softcap,
           hn_eoff (q), hn_eoff (k), hn_eoff (v), hn_eoff (dout),
           params->alibi_slopes ? hn_eoff (params->alibi_slopes) : 0, hn_eoff (stats), hn_eoff (dq), 0,
           (params->alibi_slopes ? 1u : 0u) | ((flags & HN_BACK_ACCUMULATE) ? 2u : 0u) };
  HnTensor *sl = params->alibi_slopes ? params->alibi_slopes : q;
  HnVkBinding bq[7] = { hn_bind (q, FALSE), hn_bind (k, FALSE), hn_bind (v, FALSE), hn_bind (dout, FALSE),
                        hn_bind (sl, FALSE), hn_bind (stats, TRUE), hn_bind (dq, TRUE) };
  HnVkBinding bkv[8] = { hn_bind (q, FALSE), hn_bind (k, FALSE), hn_bind (v, FALSE), hn_bind (dout, FALSE),
                         hn_bind (sl, FALSE), hn_bind (stats, FALSE), hn_bind (dk, TRUE), hn_bind (dv, TRUE) };
  /* Head dims <= 128: blocks of queries (pass 1) and keys (pass 2) share
   * the other side's rows through shared memory (the *_tiled shaders);
   * above that, one invocation per row. */
  if (D <= 128 && Dv <= 128 && g_getenv ("HN_NO_ATTN_TILED") == NULL)
    {
      hn_cmd_set_label (cmd, "attention_back_q");
      gboolean ok = hn_cmd_dispatch (cmd, "attention_back_q_tiled", NULL, 0, bq, 7, &pc, sizeof pc,
                                     (guint32) ((T + 15) / 16), (guint32) H, (guint32) B, error);
      pc.g_off = hn_eoff (dk);
      pc.g2_off = hn_eoff (dv);
      hn_cmd_set_label (cmd, "attention_back_kv");
      ok = ok && hn_cmd_dispatch (cmd, "attention_back_kv_tiled", NULL, 0, bkv, 8, &pc, sizeof pc,
                                  (guint32) ((S + 15) / 16), (guint32) KVH, (guint32) B, error);
      hn_cmd_set_label (cmd, NULL);
      return ok;
    }
  guint32 gx, gy;
  hn_grid ((guint64) (B * T * H + 63) / 64, &gx, &gy);
  if (!hn_cmd_dispatch (cmd, "attention_back_q", NULL, 0, bq, 7, &pc, sizeof pc, gx, gy, 1, error))
    return FALSE;
  pc.g_off = hn_eoff (dk);
  pc.g2_off = hn_eoff (dv);
  hn_grid ((guint64) (B * S * KVH + 63) / 64, &gx, &gy);
  return hn_cmd_dispatch (cmd, "attention_back_kv", NULL, 0, bkv, 8, &pc, sizeof pc, gx, gy, 1, error);
}

gboolean
hn_attention_flash_ok (HnVkContext *ctx, gint64 D, gint64 Dv, const HnAttentionParams *params)
{
  static const HnAttentionParams defaults = { 0 };
  if (!params)
    params = &defaults;
  return ctx && hn_vk_context_has_coopmat2 (ctx, NULL) && D == Dv && (D == 64 || D == 128) &&
         params->softcap == 0.0f && !params->alibi_slopes && !params->mask && !params->sinks && !params->dyn_pos &&
         !params->scratch && params->pos0 >= 0 && params->window >= 0 && params->local_chunk == 0 &&
         g_getenv ("HN_NO_FLASH_ATTN") == NULL;
}

gboolean
hn_op_attention_back_flash (HnCmd *cmd, HnTensor *dq, HnTensor *dk, HnTensor *dv, HnTensor *dout, HnTensor *q,
                            HnTensor *k, HnTensor *v, HnTensor *out, HnTensor *lse, HnTensor *stats,
                            const HnAttentionParams *params, HnBackFlags flags, GError **error)
{
  const char *op = "attention_back_flash";
  static const HnAttentionParams defaults = { 0 };
  if (!params)
    params = &defaults;
  if (!check_f32 (op, "dq", cmd, dq, error) || !check_f32 (op, "dk", cmd, dk, error) ||
      !check_f32 (op, "dv", cmd, dv, error) || !check_f32 (op, "dout", cmd, dout, error) ||
      !check_f32 (op, "q", cmd, q, error) || !check_f32 (op, "k", cmd, k, error) || !check_f32 (op, "v", cmd, v, error) ||
      !check_f32 (op, "out", cmd, out, error) || !check_f32 (op, "lse", cmd, lse, error) ||
      !check_f32 (op, "stats", cmd, stats, error))
    return FALSE;
  if (!dq || !dk || !dv || !dout || !q || !k || !v || !out || !lse || !stats)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: every tensor is required", op);
      return FALSE;
    }
  gboolean batched = q->ndim == 4;
  int o = batched ? 1 : 0;
  if ((q->ndim != 3 && q->ndim != 4) || k->ndim != q->ndim || v->ndim != q->ndim)
    return fail_shape (op, q, k, "q, k and v must be [B,] T, H, D", error);
  gint64 B = batched ? q->shape[0] : 1;
  gint64 T = q->shape[o], H = q->shape[o + 1], D = q->shape[o + 2];
  gint64 S = k->shape[o], KVH = k->shape[o + 1], Dv = v->shape[o + 2];
  if ((batched && (k->shape[0] != B || v->shape[0] != B)) || k->shape[o + 2] != D || v->shape[o] != S ||
      v->shape[o + 1] != KVH || dout->n != q->n || out->n != q->n || H % KVH != 0 || dq->n != q->n ||
      dk->n != k->n || dv->n != v->n || (params->n_kv > 0 && params->n_kv != S))
    return fail_shape (op, q, k, "shapes do not fit (heads must be a multiple of KV heads; n_kv must be all of k)",
                       error);
  if (!hn_attention_flash_ok (hn_cmd_get_context (cmd), D, Dv, params))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%s: needs VK_NV_cooperative_matrix2, head dim 64 or 128 and no soft-cap, ALiBi, mask or sinks "
                   "(hn_attention_flash_ok)", op);
      return FALSE;
    }
  if (!hn_op_check_count (op, "lse", lse, B * T * H, error) || !check_at_least (op, "stats", stats, 2 * B * T * H, error))
    return FALSE;
  if (B > 65535 || H > 65535 || T > G_MAXINT32 || params->pos0 > G_MAXINT32 || params->window > G_MAXINT32)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: batch or heads above 65535", op);
      return FALSE;
    }
  guint32 nt = 0;
  hn_vk_context_has_coopmat2 (hn_cmd_get_context (cmd), &nt);
  float scale = params->scale != 0.0f ? params->scale : 1.0f / sqrtf ((float) D);
  /* Pass 0 (attention_back_cm2_prep.comp): f16 copies of Q, r·dO, K and V
   * in the recorder's scratch, each region 256-byte aligned, and the rows'
   * Δ and max |dO| in stats; then the dQ pass and the dK/dV pass read
   * 16-bit operands only. */
  gint64 nq = B * T * H * D, nk = B * S * KVH * D;
  guint64 q_bytes = ((guint64) nq * 2 + 255) & ~(guint64) 255, k_bytes = ((guint64) nk * 2 + 255) & ~(guint64) 255;
  guint64 h_bytes = 2 * q_bytes + 2 * k_bytes;
  if (h_bytes / 2 > G_MAXUINT32)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: q, k, v and dout above 4 Gi elements together", op);
      return FALSE;
    }
  HnVkBuffer *hs = hn_cmd_scratch (cmd, h_bytes, error);
  if (!hs)
    return FALSE;
  guint32 q16 = 0, do16 = (guint32) (q_bytes / 2), k16 = (guint32) (2 * q_bytes / 2),
          v16 = (guint32) ((2 * q_bytes + k_bytes) / 2);
  struct {
    guint32 rows_q, rows_kv, q_off, k_off, v_off, do_off, o_off, st_off, q16, k16, v16, do16;
  } pp = { (guint32) (B * T * H), (guint32) (B * S * KVH), hn_eoff (q), hn_eoff (k), hn_eoff (v), hn_eoff (dout),
           hn_eoff (out), hn_eoff (stats), q16, k16, v16, do16 };
  HnVkBinding bp[7] = { hn_bind (q, FALSE), hn_bind (k, FALSE), hn_bind (v, FALSE), hn_bind (dout, FALSE),
                        hn_bind (out, FALSE), hn_bind (stats, TRUE), { hs, 0, h_bytes, TRUE } };
  guint32 pspec[1] = { (guint32) D }, gx, gy;
  hn_grid (((guint64) pp.rows_q + pp.rows_kv + 15) / 16, &gx, &gy);
  hn_cmd_set_label (cmd, "attention_back_cm2_prep");
  gboolean ok = hn_cmd_dispatch (cmd, "attention_back_cm2_prep", pspec, 1, bp, 7, &pp, sizeof pp, gx, gy, 1, error);
  struct {
    guint32 B, T, H, KVH, S;
    gint32 pos0;
    guint32 window, causal;
    float scale;
    guint32 q16, k16, v16, do16, lse_off, st_off, g_off, g2_off, flags;
  } pc = { (guint32) B, (guint32) T, (guint32) H, (guint32) KVH, (guint32) S, (gint32) params->pos0,
           (guint32) params->window, params->causal ? 1u : 0u, scale, q16, k16, v16, do16,
           hn_eoff (lse), hn_eoff (stats), hn_eoff (dq), 0, (flags & HN_BACK_ACCUMULATE) ? 2u : 0u };
  /* Blocks of BR queries by BC keys: 64 x 128 in the dQ pass, 64 x 32 in the
   * dK/dV pass (gpt2-124m 8 x 1024: 3.18 against 3.56 ms and 4.19 against
   * 4.39 ms on 64 x 64, 2026-12-03h) for head dims up to 64, 64 x 64 in both
   * for larger ones (not measured on other tiles);
   * HN_FA_BACK_TILE="qBR,qBC,kvBR,kvBC" overrides (at most 256, every product
   * within the device's granularity on nt invocations). */
  guint32 tile[4] = { 64, D <= 64 ? 128 : 64, 64, D <= 64 ? 32 : 64 };
  const char *te = g_getenv ("HN_FA_BACK_TILE");
  guint32 t4[4];
  if (te)
    {
      const HnVkDeviceInfo *info = hn_vk_context_get_device_info (hn_cmd_get_context (cmd));
      guint32 d = (guint32) D;
      gboolean good = sscanf (te, "%u,%u,%u,%u", &t4[0], &t4[1], &t4[2], &t4[3]) == 4;
      for (int i = 0; good && i < 4; i++)
        good = t4[i] <= 256;
      /* dQ pass (BR x BC): S and dP BR x BC over D, dQ BR x D over BC; dK/dV pass (queries BR,
       * keys BC): Sᵀ and dPᵀ BC x BR over D, dV and dK BC x D over BR */
      good = good && hn_vk_coopmat2_product_ok (info, nt, t4[0], t4[1], d) &&
             hn_vk_coopmat2_product_ok (info, nt, t4[0], d, t4[1]) &&
             hn_vk_coopmat2_product_ok (info, nt, t4[3], t4[2], d) &&
             hn_vk_coopmat2_product_ok (info, nt, t4[3], d, t4[2]);
      if (good)
        memcpy (tile, t4, sizeof tile);
      else
        {
          static gsize once = 0;
          hn_op_warn_tile_once (&once, "HN_FA_BACK_TILE", te);
        }
    }
  guint32 qspec[4] = { (guint32) D, nt, tile[0], tile[1] }, kvspec[4] = { (guint32) D, nt, tile[2], tile[3] };
  HnVkBinding bq[4] = { { hs, 0, h_bytes, FALSE }, hn_bind (lse, FALSE), hn_bind (stats, FALSE), hn_bind (dq, TRUE) };
  hn_cmd_set_label (cmd, "attention_back_cm2_q");
  ok = ok && hn_cmd_dispatch (cmd, "attention_back_cm2_q", qspec, 4, bq, 4, &pc, sizeof pc,
                              (guint32) ((T + tile[0] - 1) / tile[0]), (guint32) H, (guint32) B, error);
  pc.g_off = hn_eoff (dk);
  pc.g2_off = hn_eoff (dv);
  HnVkBinding bkv[5] = { { hs, 0, h_bytes, FALSE }, hn_bind (lse, FALSE), hn_bind (stats, FALSE), hn_bind (dk, TRUE),
                         hn_bind (dv, TRUE) };
  hn_cmd_set_label (cmd, "attention_back_cm2_kv");
  ok = ok && hn_cmd_dispatch (cmd, "attention_back_cm2_kv", kvspec, 4, bkv, 5, &pc, sizeof pc,
                              (guint32) ((S + tile[3] - 1) / tile[3]), (guint32) KVH, (guint32) B, error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
}

/* The arguments of the n-adapter LoRA ops: 1 to 3 pairs (a[j], b[j]) beside one shared tensor,
 * every one present and f32 (the shapes are each op's own). */
static gboolean
check_lora_pairs (const char *op, HnCmd *cmd, int n, HnTensor *one, const char *one_name, HnTensor **a,
                  const char *a_name, HnTensor **b, const char *b_name, GError **error)
{
  if (n < 1 || n > 3 || !one || !a || !b)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: %s and 1 to 3 pairs of %s and %s are required", op,
                   one_name, a_name, b_name);
      return FALSE;
    }
  if (!check_f32 (op, one_name, cmd, one, error))
    return FALSE;
  for (int j = 0; j < n; j++)
    {
      if (!a[j] || !b[j])
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: %s, %s and %s are required", op, one_name,
                       a_name, b_name);
          return FALSE;
        }
      if (!check_f32 (op, a_name, cmd, a[j], error) || !check_f32 (op, b_name, cmd, b[j], error))
        return FALSE;
    }
  return TRUE;
}

gboolean
hn_op_lora_expand_n (HnCmd *cmd, int n, HnTensor *c, HnTensor **u, HnTensor **w, gboolean w_trans, float alpha,
                     gboolean accumulate, GError **error)
{
  const char *op = "lora_expand";
  if (!check_lora_pairs (op, cmd, n, c, "c", u, "u", w, "w", error))
    return FALSE;
  gint64 M = hn_tensor_rows (c), N = hn_tensor_cols (c), R = hn_tensor_cols (u[0]);
  gint64 w_rows = w_trans ? N : R, w_cols = w_trans ? R : N;
  for (int j = 0; j < n; j++)
    {
      if (hn_tensor_rows (u[j]) != M || hn_tensor_cols (u[j]) != R || hn_tensor_rows (w[j]) != w_rows ||
          hn_tensor_cols (w[j]) != w_cols || R < 1 || R > 32)
        return fail_shape (op, c, u[j], "c [M, N], u [M, r] and w [N, r] (or [r, N]) with 1 <= r <= 32, one r for all",
                           error);
    }
  if (M > (gint64) 16 * 65535 || N > G_MAXUINT32 - 256)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: more than %d rows", op, 16 * 65535);
      return FALSE;
    }
  int j1 = n > 1 ? 1 : 0, j2 = n > 2 ? 2 : 0;
  struct {
    guint32 M, N, u_off, u_sm, w_off, w_sk, w_sn, c_off, c_sm;
    float alpha;
    guint32 flags, u_off1, w_off1, u_off2, w_off2;
  } pc = { (guint32) M, (guint32) N, hn_eoff (u[0]), (guint32) R, hn_eoff (w[0]), w_trans ? 1u : (guint32) N,
           w_trans ? (guint32) R : 1u, hn_eoff (c), (guint32) N, alpha, accumulate ? 1u : 0u,
           hn_eoff (u[j1]), hn_eoff (w[j1]), hn_eoff (u[j2]), hn_eoff (w[j2]) };
  /* under fp16 autocast, rounded as hn_op_bmm rounds (lora_expand.comp's F16) */
  guint32 spec[4] = { (guint32) R, pc.c_off % 4 == 0 && N % 4 == 0, (guint32) n, hn_op_matmul_f16 (cmd, 0) ? 1u : 0u };
  /* the pairs past n bound to the first (not read) */
  HnVkBinding bd[7] = { hn_bind (u[0], FALSE), hn_bind (w[0], FALSE), hn_bind (c, TRUE), hn_bind (u[j1], FALSE),
                        hn_bind (w[j1], FALSE), hn_bind (u[j2], FALSE), hn_bind (w[j2], FALSE) };
  hn_cmd_set_label (cmd, op);
  gboolean ok = hn_cmd_dispatch (cmd, "lora_expand", spec, 4, bd, 7, &pc, sizeof pc, (guint32) ((N + 255) / 256),
                                 (guint32) ((M + 15) / 16), 1, error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
}

gboolean
hn_op_lora_expand (HnCmd *cmd, HnTensor *c, HnTensor *u, HnTensor *w, gboolean w_trans, float alpha,
                   gboolean accumulate, GError **error)
{
  return hn_op_lora_expand_n (cmd, 1, c, &u, &w, w_trans, alpha, accumulate, error);
}

gboolean
hn_op_lora_down_available (HnCmd *cmd, gint64 r)
{
  const HnVkDeviceInfo *info = hn_vk_context_get_device_info (hn_cmd_get_context (cmd));
  return info->subgroup_arithmetic && info->subgroup_size >= 1 && r >= 1 && r <= 16 && g_getenv ("HN_LORA_BMM") == NULL;
}

/* Rows per subgroup of lora_rows.comp: 2 while that leaves 256 workgroups
 * or more (each load of W then serves two rows), else 1; HN_LORA_ROWS_RB=1..4
 * overrides. */
static guint32
lora_rows_rb (gint64 M)
{
  const char *e = g_getenv ("HN_LORA_ROWS_RB");
  if (e && e[0] >= '1' && e[0] <= '4' && !e[1])
    return (guint32) (e[0] - '0');
  return M >= 2 * 4 * 256 ? 2 : 1;
}

gboolean
hn_op_lora_rows_n (HnCmd *cmd, int n, HnTensor **c, HnTensor *x, HnTensor **w, gboolean w_trans, float alpha,
                   gboolean accumulate, GError **error)
{
  const char *op = "lora_rows";
  if (!check_lora_pairs (op, cmd, n, x, "x", c, "c", w, "w", error))
    return FALSE;
  gint64 M = hn_tensor_rows (x), K = hn_tensor_cols (x), R = hn_tensor_cols (c[0]);
  for (int j = 0; j < n; j++)
    {
      if (hn_tensor_rows (c[j]) != M || hn_tensor_cols (c[j]) != R || hn_tensor_rows (w[j]) != (w_trans ? R : K) ||
          hn_tensor_cols (w[j]) != (w_trans ? K : R))
        return fail_shape (op, c[j], x, "c [M, r], x [M, K] and w [r, K] (or [K, r]), one r for all", error);
    }
  if (!hn_op_lora_down_available (cmd, R))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: needs subgroup arithmetic and a rank of 1..16", op);
      return FALSE;
    }
  const HnVkDeviceInfo *info = hn_vk_context_get_device_info (hn_cmd_get_context (cmd));
  struct {
    guint32 L, K, x_off, x_sl, w_off, c_off, c_sl;
    float alpha;
    guint32 flags, w_off1, c_off1, w_off2, c_off2;
  } pc = { (guint32) M, (guint32) K, hn_eoff (x), (guint32) K, hn_eoff (w[0]), hn_eoff (c[0]), (guint32) R, alpha,
           accumulate ? 1u : 0u, hn_eoff (w[n > 1 ? 1 : 0]), hn_eoff (c[n > 1 ? 1 : 0]), hn_eoff (w[n - 1]),
           hn_eoff (c[n - 1]) };
  gboolean vec = pc.x_off % 4 == 0 && K % 4 == 0 && (w_trans || R % 4 == 0);
  for (int j = 0; j < n; j++)
    vec = vec && hn_eoff (w[j]) % 4 == 0;
  guint32 sg = MIN (info->subgroup_size, 128), rb = lora_rows_rb (M);
  gboolean f16 = hn_op_matmul_f16 (cmd, 0);
  /* under fp16 autocast each W rounded once, into f16 copies (lora_rows.comp's WH;
   * HN_LORA_W16=0 rounds on every load instead, the same bits) */
  gboolean wh = f16 && g_strcmp0 (g_getenv ("HN_LORA_W16"), "0") != 0;
  guint32 spec[8] = { (guint32) R, w_trans ? 1u : 0u, vec ? 1u : 0u, 4 * sg, (guint32) n, rb, f16 ? 1u : 0u,
                      wh ? 1u : 0u }, gx, gy;
  hn_grid (((guint64) M + 4 * rb - 1) / (4 * rb), &gx, &gy);
  /* the pairs past n bound to the first (not read or written) */
  HnVkBinding bd[7] = { hn_bind (x, FALSE), hn_bind (w[0], FALSE), hn_bind (c[0], TRUE),
                        hn_bind (w[n > 1 ? 1 : 0], FALSE), hn_bind (c[n > 1 ? 1 : 0], n > 1),
                        hn_bind (w[n > 2 ? 2 : 0], FALSE), hn_bind (c[n > 2 ? 2 : 0], n > 2) };
  if (wh)
    {
      /* the copies side by side in a weight scratch slot, 256 bytes apart at least */
      guint64 at[3], total = 0;
      for (int j = 0; j < n; j++)
        {
          at[j] = total;
          total += ((guint64) w[j]->n * 2 + 255) & ~(guint64) 255;
        }
      HnVkBuffer *s = hn_cmd_scratch_weight (cmd, total, error);
      if (!s)
        return FALSE;
      for (int j = 0; j < n; j++)
        {
          guint64 bytes = ((guint64) w[j]->n + 1) / 2 * 4;
          if (!hn_record_to_f16 (cmd, "to_f16", w[j], s, at[j], bytes, 1, error))
            return FALSE;
          bd[1 + 2 * j] = (HnVkBinding) { s, at[j], (j + 1 < n ? at[j + 1] : total) - at[j], FALSE };
        }
      for (int j = n; j < 3; j++)
        bd[1 + 2 * j] = bd[1];
      /* (a binding's range orders the hazards; the shader addresses the whole buffer) */
      pc.w_off = (guint32) (at[0] / 2);
      pc.w_off1 = (guint32) (at[n > 1 ? 1 : 0] / 2);
      pc.w_off2 = (guint32) (at[n - 1] / 2);
    }
  hn_cmd_set_label (cmd, op);
  gboolean ok = hn_cmd_dispatch (cmd, "lora_rows", spec, 8, bd, 7, &pc, sizeof pc, gx, gy, 1, error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
}

gboolean
hn_op_lora_rows (HnCmd *cmd, HnTensor *c, HnTensor *x, HnTensor *w, gboolean w_trans, float alpha,
                 gboolean accumulate, GError **error)
{
  return hn_op_lora_rows_n (cmd, 1, &c, x, &w, w_trans, alpha, accumulate, error);
}

gboolean
hn_op_lora_cols_n (HnCmd *cmd, int n, HnTensor **c, HnTensor *x, HnTensor **w, gboolean c_trans, float alpha,
                   gboolean accumulate, GError **error)
{
  const char *op = "lora_cols";
  if (!check_lora_pairs (op, cmd, n, x, "x", c, "c", w, "w", error))
    return FALSE;
  gint64 K = hn_tensor_rows (x), L = hn_tensor_cols (x), R = hn_tensor_cols (w[0]);
  for (int j = 0; j < n; j++)
    {
      if (K < 1 || L < 1 || hn_tensor_rows (w[j]) != K || hn_tensor_cols (w[j]) != R ||
          hn_tensor_rows (c[j]) != (c_trans ? R : L) || hn_tensor_cols (c[j]) != (c_trans ? L : R))
        return fail_shape (op, c[j], x, "x [K, L] (not empty), w [K, r] and c [L, r] (or [r, L]), one r for all",
                           error);
    }
  if (!hn_op_lora_down_available (cmd, R))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: needs subgroup arithmetic and a rank of 1..16", op);
      return FALSE;
    }
  if (n * R > 32)
    {
      /* the chunk's W rows of every pair in shared memory: at most 32 KiB */
      for (int j = 0; j < n; j++)
        if (!hn_op_lora_cols_n (cmd, 1, &c[j], x, &w[j], c_trans, alpha, accumulate, error))
          return FALSE;
      return TRUE;
    }
  if ((guint64) n * L * R > G_MAXUINT32 / 2 || K > G_MAXUINT32 / 2)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: too large", op);
      return FALSE;
    }
  /* k chunks of at most 256 rows, about 256 workgroups in all and at most
   * 64 partial sums per output (unless K needs more chunks of 256) */
  guint64 lb = ((guint64) L + 255) / 256;
  guint64 chunks = CLAMP ((256 + lb - 1) / lb, 1, MIN ((guint64) K, 64));
  guint64 kc = MIN ((K + chunks - 1) / chunks, 256);
  chunks = (K + kc - 1) / kc;
  if (chunks > 65535)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: more than 65535 chunks of 256 rows", op);
      return FALSE;
    }
  guint64 part_bytes = (guint64) n * chunks * R * L * 4;
  HnVkBuffer *sc = hn_cmd_scratch (cmd, part_bytes, error);
  if (!sc)
    return FALSE;
  int j1 = n > 1 ? 1 : 0, j2 = n > 2 ? 2 : 0;
  struct {
    guint32 L, K, kc, chunks, x_off, x_sk, w_off, part_off, c_off;
    float alpha;
    guint32 flags, w_off1, c_off1, w_off2, c_off2;
  } pc = { (guint32) L, (guint32) K, (guint32) kc, (guint32) chunks, hn_eoff (x), (guint32) L, hn_eoff (w[0]), 0,
           hn_eoff (c[0]), alpha, accumulate ? 1u : 0u, hn_eoff (w[j1]), hn_eoff (c[j1]), hn_eoff (w[j2]),
           hn_eoff (c[j2]) };
  guint32 spec[5] = { (guint32) R, 0, c_trans ? 1u : 0u, (guint32) n, hn_op_matmul_f16 (cmd, 0) ? 1u : 0u };
  HnVkBinding bd[8] = { hn_bind (x, FALSE), hn_bind (w[0], FALSE), { sc, 0, part_bytes, TRUE }, hn_bind (c[0], FALSE),
                        hn_bind (w[j1], FALSE), hn_bind (c[j1], FALSE), hn_bind (w[j2], FALSE), hn_bind (c[j2], FALSE) };
  hn_cmd_set_label (cmd, op);
  gboolean ok = hn_cmd_dispatch (cmd, "lora_cols", spec, 5, bd, 8, &pc, sizeof pc, (guint32) lb, (guint32) chunks, 1,
                                 error);
  spec[1] = 1;
  /* the pairs past n bound to the first (not written) */
  HnVkBinding br[8] = { hn_bind (x, FALSE), hn_bind (w[0], FALSE), { sc, 0, part_bytes, FALSE }, hn_bind (c[0], TRUE),
                        hn_bind (w[j1], FALSE), hn_bind (c[j1], n > 1), hn_bind (w[j2], FALSE), hn_bind (c[j2], n > 2) };
  guint32 gx, gy;
  hn_grid (((guint64) n * L * R + 255) / 256, &gx, &gy);
  ok = ok && hn_cmd_dispatch (cmd, "lora_cols", spec, 5, br, 8, &pc, sizeof pc, gx, gy, 1, error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
}

gboolean
hn_op_lora_cols (HnCmd *cmd, HnTensor *c, HnTensor *x, HnTensor *w, gboolean c_trans, float alpha,
                 gboolean accumulate, GError **error)
{
  return hn_op_lora_cols_n (cmd, 1, &c, x, &w, c_trans, alpha, accumulate, error);
}

/* hn_op_adamw, hn_op_adamw_f16 (param16) and hn_op_adamw_replayable
 * (scalars: clip, lr_wd, step_size and bc2_sqrt from its elements 4·index ..). */
static gboolean
adamw_dispatch (HnCmd *cmd, HnTensor *param, HnTensor *param16, HnTensor *grad, HnTensor *m, HnTensor *v,
                const HnAdamwScalars *s, float clip, HnTensor *scalars, guint index, GError **error)
{
  const char *op = param16 ? "adamw_f16" : "adamw";
  if (!check_f32 (op, "param", cmd, param, error) || !check_f32 (op, "grad", cmd, grad, error) ||
      !check_f32 (op, "m", cmd, m, error) || !check_f32 (op, "v", cmd, v, error) ||
      !hn_op_check_count (op, "grad", grad, param->n, error) || !hn_op_check_count (op, "m", m, param->n, error) ||
      !hn_op_check_count (op, "v", v, param->n, error))
    return FALSE;
  if (param16 && (!hn_op_check_ctx (op, cmd, param16, error) ||
                  !hn_op_check_dtype (op, "param16", param16, HN_DTYPE_F16, error) ||
                  !hn_op_check_count (op, "param16", param16, param->n, error)))
    return FALSE;
  if (param16 && (hn_eoff (param16) & 1))
    return fail_shape (op, param16, param, "the f16 copy must start at an even element", error);
  if (scalars && (!check_f32 (op, "scalars", cmd, scalars, error) ||
                  scalars->n < 4 * ((gint64) index + 1)))
    return fail_shape (op, scalars, param, "scalars must hold 4 values per index", error);
  struct {
    guint32 n, p_off, g_off, m_off, v_off;
    float clip, lr_wd, one_m_beta1, beta2, one_m_beta2, step_size, bc2_sqrt, eps;
    guint32 h_off, s_off;
  } pc = { (guint32) param->n, hn_eoff (param), hn_eoff (grad), hn_eoff (m), hn_eoff (v),
           clip, s->lr_wd, s->one_m_beta1, s->beta2, s->one_m_beta2, s->step_size, s->bc2_sqrt, s->eps,
           param16 ? hn_eoff (param16) / 2 : 0, scalars ? hn_eoff (scalars) + 4 * index : 0 };
  guint32 dyn = scalars != NULL;
  /* the scalars' binding follows the others; without them grad stands in */
  HnVkBinding bd[6] = { hn_bind (param, TRUE), hn_bind (grad, FALSE), hn_bind (m, TRUE), hn_bind (v, TRUE) };
  guint nb = 4;
  if (param16)
    bd[nb++] = hn_bind (param16, TRUE);
  bd[nb++] = hn_bind (scalars ? scalars : grad, FALSE);
  if (!param16)
    return hn_op_dispatch_elems (cmd, "adamw", &dyn, 1, bd, nb, &pc, sizeof pc, (guint64) param->n, error);
  return hn_op_dispatch_elems (cmd, "adamw_f16", &dyn, 1, bd, nb, &pc, sizeof pc, ((guint64) param->n + 1) / 2, error);
}

gboolean
hn_op_adamw (HnCmd *cmd, HnTensor *param, HnTensor *grad, HnTensor *m, HnTensor *v, const HnAdamwScalars *s,
             float clip, GError **error)
{
  return adamw_dispatch (cmd, param, NULL, grad, m, v, s, clip, NULL, 0, error);
}

gboolean
hn_op_adamw_f16 (HnCmd *cmd, HnTensor *param, HnTensor *param16, HnTensor *grad, HnTensor *m, HnTensor *v,
                 const HnAdamwScalars *s, float clip, GError **error)
{
  return adamw_dispatch (cmd, param, param16, grad, m, v, s, clip, NULL, 0, error);
}

gboolean
hn_op_adamw_replayable (HnCmd *cmd, HnTensor *param, HnTensor *param16, HnTensor *grad, HnTensor *m, HnTensor *v,
                        const HnAdamwScalars *s, HnTensor *scalars, guint index, GError **error)
{
  return adamw_dispatch (cmd, param, param16, grad, m, v, s, 1.0f, scalars, index, error);
}

void
hn_adamw_replay_values (float out[4], const HnAdamwScalars *s, float clip)
{
  out[0] = clip;
  out[1] = s->lr_wd;
  out[2] = s->step_size;
  out[3] = s->bc2_sqrt;
}

gboolean
hn_op_add_rounded_f16 (HnCmd *cmd, HnTensor *y, HnTensor *x, GError **error)
{
  const char *op = "add_rounded_f16";
  if (!check_f32 (op, "y", cmd, y, error) || !check_f32 (op, "x", cmd, x, error) ||
      !hn_op_check_count (op, "x", x, y->n, error))
    return FALSE;
  struct { guint32 n, x_off, y_off; } pc = { (guint32) y->n, hn_eoff (x), hn_eoff (y) };
  HnVkBinding bd[2] = { hn_bind (x, FALSE), hn_bind (y, TRUE) };
  return hn_op_dispatch_elems (cmd, "acc_round_f16", NULL, 0, bd, 2, &pc, sizeof pc, (guint64) y->n, error);
}

gboolean
hn_op_cast_f16_cols (HnCmd *cmd, HnTensor *out, gint64 c0, HnTensor *in, GError **error)
{
  const char *op = "cast_f16_cols";
  if (!check_f32 (op, "in", cmd, in, error) || !hn_op_check_ctx (op, cmd, out, error) ||
      !hn_op_check_dtype (op, "out", out, HN_DTYPE_F16, error))
    return FALSE;
  gint64 rows = hn_tensor_rows (in), cols = hn_tensor_cols (in), ld = hn_tensor_cols (out);
  if (hn_tensor_rows (out) != rows || c0 < 0 || c0 + cols > ld || (cols | c0 | ld | hn_eoff (out)) & 1)
    return fail_shape (op, out, in, "in must fit even columns [c0, c0 + cols) of out's rows", error);
  struct { guint32 rows, cols, x_off, y_off, ld, c0; } pc = {
    (guint32) rows, (guint32) cols, hn_eoff (in), hn_eoff (out), (guint32) ld, (guint32) c0 };
  HnVkBinding bd[2] = { hn_bind (in, FALSE), hn_bind (out, TRUE) };
  hn_cmd_set_label (cmd, "to_f16");
  gboolean ok = hn_op_dispatch_elems (cmd, "cast_f16_cols", NULL, 0, bd, 2, &pc, sizeof pc, (guint64) (rows * cols / 2),
                                      error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
}

gboolean
hn_op_cast_f16_cols_bias (HnCmd *cmd, HnTensor *out, gint64 c0, HnTensor *in, HnTensor *db, GError **error)
{
  const char *op = "cast_f16_cols_bias";
  if (!check_f32 (op, "in", cmd, in, error) || !check_f32 (op, "db", cmd, db, error) ||
      !hn_op_check_ctx (op, cmd, out, error) || !hn_op_check_dtype (op, "out", out, HN_DTYPE_F16, error) ||
      !hn_op_check_count (op, "db", db, hn_tensor_cols (in), error))
    return FALSE;
  if (!hn_op_matmul_f16 (cmd, 0))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: only under fp16 autocast (hn_cmd_set_autocast)", op);
      return FALSE;
    }
  gint64 rows = hn_tensor_rows (in), cols = hn_tensor_cols (in), ld = hn_tensor_cols (out);
  if (hn_tensor_rows (out) != rows || c0 < 0 || c0 + cols > ld || (cols | c0 | ld | hn_eoff (out) | hn_eoff (in)) & 1)
    return fail_shape (op, out, in, "in must fit even columns [c0, c0 + cols) of out's rows", error);
  return cast_f16_bias_back_ld (cmd, out, c0, ld, db, in, NULL, HN_ACT_IDENTITY, error);
}

gboolean
hn_op_unary_f16 (HnCmd *cmd, HnTensor *out, HnTensor *in, HnActivation act, GError **error)
{
  const char *op = "unary_f16";
  guint32 x16 = in && in->dtype == HN_DTYPE_F16;
  if (!check_f32_or_f16 (op, "in", cmd, in, TRUE, error) || !hn_op_check_ctx (op, cmd, out, error) ||
      !hn_op_check_dtype (op, "out", out, HN_DTYPE_F16, error) ||
      !hn_op_check_count (op, "out", out, in->n, error))
    return FALSE;
  if ((guint) act > HN_ACT_TANH || (hn_eoff (out) & 1) || (x16 && (hn_eoff (in) & 1)))
    return fail_shape (op, out, in, "a known activation into an f16 output from an even element", error);
  struct { guint32 n, in_off, out_off, act; } pc = { (guint32) in->n, hn_eoff (in), hn_eoff (out) / 2, (guint32) act };
  HnVkBinding bd[2] = { hn_bind (in, FALSE), hn_bind (out, TRUE) };
  /* eight f16 elements per invocation where counts and offsets allow 16-byte accesses */
  guint32 spec[2] = { x16, x16 && in->n % 8 == 0 && pc.in_off % 8 == 0 && pc.out_off % 4 == 0 &&
                               g_strcmp0 (g_getenv ("HN_ACT_F16_VEC"), "0") != 0 };
  hn_cmd_set_label (cmd, hn_activation_name (act));
  gboolean ok = hn_op_dispatch_elems (cmd, "act_f16", spec, 2, bd, 2, &pc, sizeof pc,
                                      spec[1] ? (guint64) in->n / 8 : ((guint64) in->n + 1) / 2, error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
}

gboolean
hn_op_cast_f16 (HnCmd *cmd, HnTensor *out, HnTensor *in, GError **error)
{
  const char *op = "cast_f16";
  if (!check_f32 (op, "in", cmd, in, error) || !hn_op_check_ctx (op, cmd, out, error) ||
      !hn_op_check_dtype (op, "out", out, HN_DTYPE_F16, error) || !hn_op_check_count (op, "out", out, in->n, error))
    return FALSE;
  if (hn_eoff (out) & 1)
    return fail_shape (op, out, in, "an f16 output must start at an even element", error);
  struct { guint32 n, x_off, y_off, mode; } cp = { (guint32) in->n, hn_eoff (in), hn_eoff (out) / 2, 1 };
  HnVkBinding bd[2] = { hn_bind (in, FALSE), hn_bind (out, TRUE) };
  guint32 vec = hn_to_f16_vec (cp.x_off, cp.y_off), gx, gy;
  hn_grid (((guint64) in->n + (vec ? 1023 : 511)) / (vec ? 1024 : 512), &gx, &gy);
  hn_cmd_set_label (cmd, "to_f16");
  gboolean ok = hn_cmd_dispatch (cmd, "to_f16", &vec, 1, bd, 2, &cp, sizeof cp, gx, gy, 1, error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
}

gboolean
hn_op_matmul_back_f16_act_ok (HnTensor *dy, HnTensor *act_x, HnTensor *dy16)
{
  return dy16 && act_x && hn_tensor_cols (dy) % 2 == 0 && hn_eoff (dy) % 2 == 0 && hn_eoff (act_x) % 2 == 0 &&
         hn_eoff (dy16) % 2 == 0 && act_x->n == dy->n &&
         (act_x->dtype == HN_DTYPE_F32 || act_x->dtype == HN_DTYPE_F16) &&
         (dy->dtype == HN_DTYPE_F32 || dy->dtype == HN_DTYPE_F16) &&
         g_strcmp0 (g_getenv ("HN_ACT_BACK_FUSED"), "0") != 0;
}

static gboolean matmul_back_f16 (HnCmd *cmd, HnTensor *dx, HnTensor *dw, HnTensor *db, HnTensor *dy, HnTensor *act_x,
                                 HnActivation act, HnTensor *dy16, HnTensor *x16, HnTensor *w16, HnTensor *dw_tmp,
                                 HnBackFlags flags, GError **error);

gboolean
hn_op_matmul_back_f16 (HnCmd *cmd, HnTensor *dx, HnTensor *dw, HnTensor *db, HnTensor *dy, HnTensor *dy16,
                       HnTensor *x16, HnTensor *w16, HnTensor *dw_tmp, HnBackFlags flags, GError **error)
{
  return matmul_back_f16 (cmd, dx, dw, db, dy, NULL, HN_ACT_IDENTITY, dy16, x16, w16, dw_tmp, flags, error);
}

gboolean
hn_op_matmul_back_f16_act (HnCmd *cmd, HnTensor *dx, HnTensor *dw, HnTensor *db, HnTensor *dy, HnTensor *act_x,
                           HnActivation act, HnTensor *dy16, HnTensor *x16, HnTensor *w16, HnTensor *dw_tmp,
                           HnBackFlags flags, GError **error)
{
  if (!hn_op_matmul_back_f16_act_ok (dy, act_x, dy16))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "matmul_back_f16_act: needs dy16, an f32 or f16 act_x of dy's shape, even columns and offsets");
      return FALSE;
    }
  return matmul_back_f16 (cmd, dx, dw, db, dy, act_x, act, dy16, x16, w16, dw_tmp, flags, error);
}

static gboolean
matmul_back_f16 (HnCmd *cmd, HnTensor *dx, HnTensor *dw, HnTensor *db, HnTensor *dy, HnTensor *act_x, HnActivation act,
                 HnTensor *dy16, HnTensor *x16, HnTensor *w16, HnTensor *dw_tmp, HnBackFlags flags, GError **error)
{
  const char *op = "matmul_back_f16";
  /* f16 (an autocast product stored f16): dy after an activation (its gradient is formed in the
   * rounding pass), dx when it is not accumulated into */
  if (!check_f32_or_f16 (op, "dy", cmd, dy, act_x != NULL, error) ||
      !check_f32_or_f16 (op, "dx", cmd, dx, !(flags & HN_BACK_ACCUMULATE), error) ||
      !check_f32 (op, "dw", cmd, dw, error) || !check_f32 (op, "db", cmd, db, error) ||
      !hn_op_check_ctx (op, cmd, x16, error) || !hn_op_check_dtype (op, "x16", x16, HN_DTYPE_F16, error) ||
      !hn_op_check_ctx (op, cmd, w16, error) || !hn_op_check_dtype (op, "w16", w16, HN_DTYPE_F16, error) ||
      (dy16 && (!hn_op_check_ctx (op, cmd, dy16, error) || !hn_op_check_dtype (op, "dy16", dy16, HN_DTYPE_F16, error))))
    return FALSE;
  if (!hn_op_matmul_f16 (cmd, 0))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: only under fp16 autocast (hn_cmd_set_autocast)", op);
      return FALSE;
    }
  gint64 M = hn_tensor_rows (dy), N = hn_tensor_cols (dy), K = hn_tensor_cols (x16);
  if (hn_tensor_rows (x16) != M)
    return fail_shape (op, dy, x16, "row counts differ", error);
  if (w16->ndim != 2 || w16->shape[0] != N || w16->shape[1] != K)
    return fail_shape (op, dy, w16, "weight must be [N, K]", error);
  g_autoptr (HnTensor) a = NULL;
  if (dy16)
    {
      if (dy16->n < M * N)
        return fail_shape (op, dy16, dy, "dy16 is smaller than dy", error);
      g_autoptr (HnTensor) flat = hn_tensor_reshape (dy16, 1, (gint64[]) { dy16->n }, error);
      g_autoptr (HnTensor) head = flat ? hn_tensor_view_rows (flat, 0, M * N, error) : NULL;
      if (!head || !(a = hn_tensor_reshape (head, 2, (gint64[]) { M, N }, error)))
        return FALSE;
      /* the bias gradient from the same read of dy where the shapes allow (HN_BIAS_BACK_F16=0: apart);
       * after an activation always (its gradient is formed in that read) */
      if (act_x || (db && N % 2 == 0 && hn_eoff (dy) % 2 == 0 && hn_eoff (a) % 2 == 0 && db->n == N &&
                    g_strcmp0 (g_getenv ("HN_BIAS_BACK_F16"), "0") != 0))
        {
          if (db && db->n != N)
            return fail_shape (op, db, dy, "db must have dy's column count", error);
          if (!cast_f16_bias_back (cmd, a, db, dy, act_x, act, error))
            return FALSE;
          db = NULL;
        }
      else if (!hn_op_cast_f16 (cmd, a, dy, error))
        return FALSE;
    }
  else if (!(a = as_2d (dy, error)))
    return FALSE;
  if (dx)
    {
      if (hn_tensor_rows (dx) != M || hn_tensor_cols (dx) != K)
        return fail_shape (op, dx, x16, "dx must have x's shape", error);
      g_autoptr (HnTensor) dx2 = as_2d (dx, error);
      if (!dx2 || !hn_op_bmm (cmd, dx2, a, w16, (flags & HN_BACK_ACCUMULATE) ? HN_MATMUL_ACCUMULATE : 0, 1.0f, error))
        return FALSE;
    }
  if (dw)
    {
      if (dw->n != N * K)
        return fail_shape (op, dw, dy, "dw must be [N, K]", error);
      g_autoptr (HnTensor) x2 = as_2d (x16, error);
      g_autoptr (HnTensor) dw2 = x2 ? hn_tensor_reshape (dw, 2, (gint64[]) { N, K }, error) : NULL;
      if (!dw2)
        return FALSE;
      /* fewer than half a GPU's worth of 128 x 128 tiles (the kernel's split-K threshold) over a long K */
      gboolean split = dw_tmp && dw_tmp->dtype == HN_DTYPE_F32 && dw_tmp->n >= N * K && M >= 4096 &&
                       ((N + 127) / 128) * ((K + 127) / 128) < 66 && g_getenv ("HN_TRAIN_NO_DW_SPLIT") == NULL;
      if (split)
        {
          g_autoptr (HnTensor) flat = hn_tensor_reshape (dw_tmp, 1, (gint64[]) { dw_tmp->n }, error);
          g_autoptr (HnTensor) head = flat ? hn_tensor_view_rows (flat, 0, N * K, error) : NULL;
          g_autoptr (HnTensor) t2 = head ? hn_tensor_reshape (head, 2, (gint64[]) { N, K }, error) : NULL;
          if (!t2)
            return FALSE;
          /* the operands are f16 already, so the product without autocast's roundings is the f32 one */
          HnAutocast ac = hn_cmd_get_autocast (cmd);
          hn_cmd_set_autocast (cmd, HN_AUTOCAST_NONE);
          gboolean ok = hn_op_bmm (cmd, t2, a, x2, HN_MATMUL_TRANS_A, 1.0f, error);
          hn_cmd_set_autocast (cmd, ac);
          if (!ok)
            return FALSE;
          if (!hn_op_add_rounded_f16 (cmd, dw2, t2, error))
            return FALSE;
        }
      else if (!hn_op_bmm (cmd, dw2, a, x2, HN_MATMUL_TRANS_A | HN_MATMUL_ACCUMULATE, 1.0f, error))
        return FALSE;
    }
  if (db && !hn_op_bias_back (cmd, db, dy, error))
    return FALSE;
  return TRUE;
}

gboolean
hn_op_sgd (HnCmd *cmd, HnTensor *param, HnTensor *grad, HnTensor *buf, float lr, float momentum, float weight_decay,
           gboolean first, float clip, GError **error)
{
  const char *op = "sgd";
  if (!check_f32 (op, "param", cmd, param, error) || !check_f32 (op, "grad", cmd, grad, error) ||
      !check_f32 (op, "buf", cmd, buf, error) || !hn_op_check_count (op, "grad", grad, param->n, error) ||
      (buf && !hn_op_check_count (op, "buf", buf, param->n, error)))
    return FALSE;
  if (momentum != 0.0f && !buf)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "sgd: momentum needs a buffer");
      return FALSE;
    }
  struct { guint32 n, p_off, g_off, b_off; float clip, lr, wd, momentum; guint32 first; } pc = {
    (guint32) param->n, hn_eoff (param), hn_eoff (grad), buf ? hn_eoff (buf) : 0, clip, lr, weight_decay, momentum,
    first ? 1u : 0u };
  HnVkBinding bd[3] = { hn_bind (param, TRUE), hn_bind (grad, FALSE), hn_bind (buf ? buf : grad, buf != NULL) };
  return hn_op_dispatch_elems (cmd, "sgd", NULL, 0, bd, 3, &pc, sizeof pc, (guint64) param->n, error);
}

guint
hn_sumsq_n_partials (gint64 n)
{
  return (guint) ((n + 4095) / 4096);
}

gboolean
hn_op_sumsq_partials (HnCmd *cmd, HnTensor *out, guint out_off, HnTensor *x, GError **error)
{
  const char *op = "sumsq";
  guint np = hn_sumsq_n_partials (x->n);
  if (!check_f32 (op, "out", cmd, out, error) || !check_f32 (op, "x", cmd, x, error))
    return FALSE;
  if ((gint64) out_off + np > out->n)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "sumsq: %u partials at %u do not fit %s", np, out_off,
                   out->name);
      return FALSE;
    }
  struct { guint32 n, x_off, o_off; } pc = { (guint32) x->n, hn_eoff (x), hn_eoff (out) + out_off };
  HnVkBinding bd[2] = { hn_bind (x, FALSE),
                        { out->buf, out->offset + (guint64) out_off * 4, (guint64) np * 4, TRUE } };
  return hn_op_dispatch_rows (cmd, "sumsq", NULL, 0, bd, 2, &pc, sizeof pc, np, error);
}
