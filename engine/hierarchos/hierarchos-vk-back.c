/* The backward of any Hierarchos Vulkan op, by kind (the contract is in
 * hierarchos-vk-private.h; each kind lives in hierarchos-vk-back-*.c). */
#include "hierarchos/hierarchos-vk-private.h"

typedef struct {
  guint32 (*scratch) (const HnHierOp *op);
  HnHierBackRefFunc ref;
  HnHierBackRecordFunc record;
} BackKind;

static const BackKind kinds[HN_HIER_N_OPS] = {
  [HN_HIER_OP_MATVEC] = { hn_hier_mv_back_scratch, hn_hier_mv_back_ref, hn_hier_mv_back_record },
  [HN_HIER_OP_NORM] = { hn_hier_norm_back_scratch, hn_hier_norm_back_ref, hn_hier_norm_back_record },
  [HN_HIER_OP_WKV] = { hn_hier_wkv_back_scratch, hn_hier_wkv_back_ref, hn_hier_wkv_back_record },
  [HN_HIER_OP_LTM] = { hn_hier_ltm_back_scratch, hn_hier_ltm_back_ref, hn_hier_ltm_back_record },
  [HN_HIER_OP_DRIFT] = { hn_hier_drift_back_scratch, hn_hier_drift_back_ref, hn_hier_drift_back_record },
  [HN_HIER_OP_EW] = { hn_hier_ew_back_scratch, hn_hier_ew_back_ref, hn_hier_ew_back_record },
};

guint32
hn_hier_op_back_scratch (const HnHierOp *op)
{
  g_assert (op->kind < HN_HIER_N_OPS);
  return kinds[op->kind].scratch (op);
}

void
hn_hier_op_back_ref (const HnHierOp *op, const float *prm, const float *wk, float *gprm, float *gwk)
{
  g_assert (op->kind < HN_HIER_N_OPS);
  kinds[op->kind].ref (op, prm, wk, gprm, gwk);
}

gboolean
hn_hier_op_back_record (HnCmd *cmd, const HnHierOp *op, HnVkBuffer *prm, HnVkBuffer *wk, HnVkBuffer *gprm,
                        HnVkBuffer *gwk, GError **error)
{
  g_assert (op->kind < HN_HIER_N_OPS);
  return kinds[op->kind].record (cmd, op, prm, wk, gprm, gwk, error);
}
