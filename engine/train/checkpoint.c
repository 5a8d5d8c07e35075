/* Checkpoint writing and reading (checkpoint.h). */
#include "train/checkpoint.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include <glib/gstdio.h>
#include <json-glib/json-glib.h>

#include "base/hn-error.h"
#include "base/hn-util.h"
#include "base/json-util.h"
#include "formats/safetensors.h"
#include "train/lora.h"

/* ---------------------------------------------------------------- model weights */

gboolean
hn_checkpoint_write_model (HnTransformer *model, const char *dir, GError **error)
{
  guint n_orig = 0;
  const HnWeightOrigin *orig = hn_transformer_get_weight_origins (model, &n_orig);
  return hn_checkpoint_write_weights (hn_transformer_get_dir (model), orig, n_orig, dir, error);
}

gboolean
hn_checkpoint_write_named (const char *src_dir, HnTensor *const *weights, guint n, const char *dir, GError **error)
{
  /* a tensor's name is its checkpoint tensor; tensors sharing a name are consecutive row blocks of it */
  g_autofree HnWeightOrigin *orig = g_new0 (HnWeightOrigin, n);
  for (guint i = 0; i < n; i++)
    {
      orig[i].t = weights[i];
      orig[i].src = weights[i]->name;
      for (guint k = 0; k < i; k++)
        if (g_strcmp0 (weights[k]->name, weights[i]->name) == 0)
          orig[i].row0 += weights[k]->shape[0];
    }
  return hn_checkpoint_write_weights (src_dir, orig, n, dir, error);
}

gboolean
hn_checkpoint_write_weights (const char *src_dir, const HnWeightOrigin *orig, guint n_orig, const char *dir,
                             GError **error)
{
  g_autoptr (HnSafetensors) st = hn_safetensors_open (src_dir, error);
  if (!st)
    return FALSE;
  g_autoptr (HnSafetensorsWriter) w = hn_safetensors_writer_new ();
  guint n = hn_safetensors_get_n_tensors (st);
  for (guint i = 0; i < n; i++)
    {
      const HnSafetensorInfo *t = hn_safetensors_get_nth (st, i);
      /* a bf16 weight the loader made f16 for the tensor cores is frozen
       * (training needs f32): its stored bytes are still the weight */
      gboolean any = FALSE, all_f16 = TRUE;
      for (guint k = 0; k < n_orig; k++)
        if (g_str_equal (orig[k].src, t->name))
          {
            any = TRUE;
            all_f16 = all_f16 && orig[k].t->dtype == HN_DTYPE_F16;
          }
      if (!any || (t->dtype == HN_ST_DTYPE_BF16 && all_f16))
        {
          if (!hn_safetensors_writer_add (w, t->name, t->dtype, t->ndim, t->shape, t->data, t->nbytes, FALSE, error))
            return FALSE;
          continue;
        }
      g_autofree float *buf = hn_safetensor_info_dup_f32 (t, error);
      if (!buf)
        return FALSE;
      /* origins count rows of the last dimension: a stacked expert tensor [E, R, C] is E * R rows */
      gint64 cols = t->ndim >= 2 ? t->shape[t->ndim - 1] : 1, n_rows = t->n_elements / cols;
      for (guint k = 0; k < n_orig; k++)
        {
          const HnWeightOrigin *o = &orig[k];
          if (!g_str_equal (o->src, t->name))
            continue;
          g_autofree float *dev = g_new (float, o->t->n);
          if (!hn_tensor_download_f32 (o->t, dev, o->t->n, error))
            return FALSE;
          gint64 rows = o->t->shape[0], dcols = o->t->n / rows;
          if (o->t->ndim == 1 && !o->transposed && !o->rows && o->row0 == 0 && t->ndim == 2 && t->shape[0] == 1 &&
              t->shape[1] == o->t->n)
            {
              /* a vector stored as one row [1, n] (ERNIE's moe_statics.e_score_correction_bias) */
              memcpy (buf, dev, sizeof (float) * (gsize) o->t->n);
              continue;
            }
          for (gint64 r = 0; r < rows; r++)
            {
              gint64 sr = o->rows ? o->rows[r] : o->row0 + r;
              if (o->transposed)
                {
                  /* device row r = source column sr of a [in, out] Conv1D */
                  if (t->ndim != 2 || sr >= t->shape[1] || dcols != t->shape[0])
                    goto bad;
                  for (gint64 c = 0; c < dcols; c++)
                    buf[c * t->shape[1] + sr] = dev[r * dcols + c];
                }
              else
                {
                  if (sr >= n_rows || (t->ndim >= 2 ? dcols != cols : dcols != 1))
                    goto bad;
                  memcpy (buf + sr * cols, dev + r * dcols, sizeof (float) * (gsize) dcols);
                }
            }
          continue;
        bad:
          g_set_error (error, HN_ERROR, HN_ERROR_FAILED, "checkpoint: device weight %s does not fit %s", o->t->name,
                       t->name);
          return FALSE;
        }
      gsize ne = (gsize) t->n_elements;
      if (t->dtype == HN_ST_DTYPE_F32)
        {
          if (!hn_safetensors_writer_add (w, t->name, t->dtype, t->ndim, t->shape, buf, ne * 4, TRUE, error))
            return FALSE;
        }
      else if (t->dtype == HN_ST_DTYPE_F16 || t->dtype == HN_ST_DTYPE_BF16)
        {
          g_autofree guint16 *h = g_new (guint16, ne);
          for (gsize e = 0; e < ne; e++)
            h[e] = t->dtype == HN_ST_DTYPE_F16 ? hn_st_f32_to_f16 (buf[e]) : hn_st_f32_to_bf16 (buf[e]);
          if (!hn_safetensors_writer_add (w, t->name, t->dtype, t->ndim, t->shape, h, ne * 2, TRUE, error))
            return FALSE;
        }
      else
        {
          g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "checkpoint: cannot write %s of dtype %s", t->name,
                       hn_st_dtype_name (t->dtype));
          return FALSE;
        }
    }
  if (!hn_model_copy_side_files (src_dir, dir, error))
    return FALSE;
  return hn_safetensors_writer_write_dir (w, dir, "model", 0, error);
}

/* ---------------------------------------------------------------- optimizer */

gboolean
hn_checkpoint_write_optimizer (HnTrainGraph *g, const char *dir, GError **error)
{
  g_autoptr (HnSafetensorsWriter) w = hn_safetensors_writer_new ();
  for (guint i = 0; i < hn_train_graph_get_n_params (g); i++)
    {
      HnTrainParam *p = hn_train_graph_get_param (g, i);
      HnTensor *st[2] = { p->m, p->v };
      const char *suffix[2] = { "exp_avg", "exp_avg_sq" };
      for (int k = 0; k < 2; k++)
        {
          g_autofree float *buf = g_new (float, st[k]->n);
          if (!hn_tensor_download_f32 (st[k], buf, st[k]->n, error))
            return FALSE;
          g_autofree char *name = g_strdup_printf ("%s.%s", p->name, suffix[k]);
          if (!hn_safetensors_writer_add (w, name, HN_ST_DTYPE_F32, (guint) st[k]->ndim, st[k]->shape, buf,
                                          sizeof (float) * (gsize) st[k]->n, TRUE, error))
            return FALSE;
        }
    }
  hn_safetensors_writer_set_metadata (w, "hierarchos.optimizer", "adamw/sgd moments per trained tensor");
  g_autofree char *path = g_build_filename (dir, "optimizer.safetensors", NULL);
  return hn_safetensors_writer_write_file (w, path, error);
}

gboolean
hn_checkpoint_read_optimizer (HnTrainGraph *g, const char *dir, GError **error)
{
  g_autofree char *path = g_build_filename (dir, "optimizer.safetensors", NULL);
  g_autoptr (HnSafetensors) st = hn_safetensors_open (path, error);
  if (!st)
    return FALSE;
  for (guint i = 0; i < hn_train_graph_get_n_params (g); i++)
    {
      HnTrainParam *p = hn_train_graph_get_param (g, i);
      HnTensor *dst[2] = { p->m, p->v };
      const char *suffix[2] = { "exp_avg", "exp_avg_sq" };
      for (int k = 0; k < 2; k++)
        {
          g_autofree char *name = g_strdup_printf ("%s.%s", p->name, suffix[k]);
          const HnSafetensorInfo *t = hn_safetensors_require (st, name, error);
          if (!t)
            return FALSE;
          if (t->dtype != HN_ST_DTYPE_F32 || t->n_elements != dst[k]->n)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s has %" G_GINT64_FORMAT " %s elements, %"
                           G_GINT64_FORMAT " F32 expected (a checkpoint of another model?)", path, name,
                           t->n_elements, hn_st_dtype_name (t->dtype), dst[k]->n);
              return FALSE;
            }
          g_autofree float *buf = hn_safetensor_info_dup_f32 (t, error);
          if (!buf || !hn_tensor_upload_f32 (dst[k], buf, dst[k]->n, error))
            return FALSE;
        }
    }
  return TRUE;
}

/* ---------------------------------------------------------------- trainer state */

void
hn_trainer_state_clear (HnTrainerState *st)
{
  g_clear_pointer (&st->lr_scheduler, g_free);
  g_clear_pointer (&st->optimizer, g_free);
  g_clear_pointer (&st->quantization, g_free);
  g_clear_pointer (&st->precision, g_free);
}

/* Written by hand: json-glib 1.6 prints some doubles as "1e-08.0", which is
 * not JSON. */
static void
put_dbl (GString *s, const char *key, double v, gboolean last)
{
  char buf[G_ASCII_DTOSTR_BUF_SIZE];
  g_ascii_dtostr (buf, sizeof buf, v);
  if (!isfinite (v))
    g_strlcpy (buf, "null", sizeof buf);
  g_string_append_printf (s, "  \"%s\": %s%s\n", key, buf, last ? "" : ",");
}

gboolean
hn_trainer_state_write (const HnTrainerState *st, const char *dir, GError **error)
{
  g_autoptr (GString) s = g_string_new ("{\n");
  g_string_append_printf (s, "  \"format_version\": 1,\n");
  g_string_append_printf (s, "  \"global_step\": %" G_GINT64_FORMAT ",\n", st->global_step);
  g_string_append_printf (s, "  \"cursor\": {\"epoch\": %" G_GUINT64_FORMAT ", \"index\": %" G_GUINT64_FORMAT "},\n",
                          st->cursor.epoch, st->cursor.index);
  /* the seed as a string: JSON numbers lose 64-bit integers in many readers */
  g_string_append_printf (s, "  \"seed\": \"%" G_GUINT64_FORMAT "\",\n", st->seed);
  g_string_append_printf (s, "  \"total_steps\": %" G_GINT64_FORMAT ",\n", st->total_steps);
  g_string_append_printf (s, "  \"warmup_steps\": %" G_GINT64_FORMAT ",\n", st->warmup_steps);
  g_string_append_printf (s, "  \"lr_scheduler\": \"%s\",\n", st->lr_scheduler ? st->lr_scheduler : "linear");
  g_string_append_printf (s, "  \"optimizer\": \"%s\",\n", st->optimizer ? st->optimizer : "adamw");
  put_dbl (s, "lr", st->lr, FALSE);
  put_dbl (s, "weight_decay", st->weight_decay, FALSE);
  put_dbl (s, "beta1", st->beta1, FALSE);
  put_dbl (s, "beta2", st->beta2, FALSE);
  put_dbl (s, "eps", st->eps, FALSE);
  put_dbl (s, "max_grad_norm", st->max_grad_norm, FALSE);
  g_string_append_printf (s, "  \"batch_size\": %" G_GINT64_FORMAT ",\n", st->batch_size);
  g_string_append_printf (s, "  \"seq_len\": %" G_GINT64_FORMAT ",\n", st->seq_len);
  g_string_append_printf (s, "  \"grad_accum\": %" G_GINT64_FORMAT ",\n", st->grad_accum);
  g_string_append_printf (s, "  \"lora\": %s,\n", st->lora ? "true" : "false");
  g_string_append_printf (s, "  \"quantization\": \"%s\",\n", st->quantization ? st->quantization : "none");
  put_dbl (s, "elapsed_s", st->elapsed_s, FALSE);
  put_dbl (s, "tokens_seen", st->tokens_seen, FALSE);
  put_dbl (s, "best_eval_loss", st->best_eval_loss, FALSE);
  g_string_append_printf (s, "  \"evals_since_best\": %" G_GINT64_FORMAT ",\n", st->evals_since_best);
  g_string_append_printf (s, "  \"optimizer_steps\": %" G_GINT64_FORMAT ",\n", st->optimizer_steps);
  g_string_append_printf (s, "  \"precision\": \"%s\",\n", st->precision ? st->precision : "fp32");
  put_dbl (s, "loss_scale", st->loss_scale, FALSE);
  g_string_append_printf (s, "  \"loss_scale_growth_tracker\": %" G_GINT64_FORMAT "\n", st->loss_scale_growth_tracker);
  g_string_append (s, "}\n");
  g_autofree char *path = g_build_filename (dir, "trainer_state.json", NULL);
  return hn_write_file_atomic (path, s->str, s->len, error);
}

static gboolean
get_int (JsonObject *o, const char *k, gint64 *out, const char *path, GError **error)
{
  if (!json_object_has_member (o, k) || !hn_json_node_get_int (json_object_get_member (o, k), out))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: '%s' is missing or not an integer", path, k);
      return FALSE;
    }
  return TRUE;
}

static gboolean
get_dbl (JsonObject *o, const char *k, double *out, const char *path, GError **error)
{
  if (!json_object_has_member (o, k) || !hn_json_node_get_double (json_object_get_member (o, k), out))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: '%s' is missing or not a number", path, k);
      return FALSE;
    }
  return TRUE;
}

gboolean
hn_trainer_state_read (HnTrainerState *st, const char *dir, GError **error)
{
  g_autofree char *path = g_build_filename (dir, "trainer_state.json", NULL);
  g_autofree char *text = NULL;
  gsize len = 0;
  g_autoptr (GError) local = NULL;
  if (!hn_file_read_bounded (path, HN_MAX_CONFIG_BYTES, "trainer state", &text, &len, &local))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s is not a checkpoint of this trainer: %s", dir,
                   local->message);
      return FALSE;
    }
  g_autoptr (JsonParser) p = json_parser_new ();
  if (!hn_json_parser_load (p, text, (gssize) len, path, error))
    return FALSE;
  JsonNode *root = json_parser_get_root (p);
  if (!root || !JSON_NODE_HOLDS_OBJECT (root))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: not a JSON object", path);
      return FALSE;
    }
  JsonObject *o = json_node_get_object (root);
  memset (st, 0, sizeof *st);
  gint64 ver = 0, ce = 0, ci = 0;
  JsonObject *cur = json_object_has_member (o, "cursor") && JSON_NODE_HOLDS_OBJECT (json_object_get_member (o, "cursor"))
                    ? json_object_get_object_member (o, "cursor") : NULL;
  if (!get_int (o, "format_version", &ver, path, error))
    return FALSE;
  if (ver != 1)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: format_version %" G_GINT64_FORMAT " is not 1", path, ver);
      return FALSE;
    }
  if (!cur)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: 'cursor' is missing", path);
      return FALSE;
    }
  const char *seed = json_object_get_string_member_with_default (o, "seed", NULL);
  if (!get_int (o, "global_step", &st->global_step, path, error) || !get_int (cur, "epoch", &ce, path, error) ||
      !get_int (cur, "index", &ci, path, error) || !get_int (o, "total_steps", &st->total_steps, path, error) ||
      !get_int (o, "warmup_steps", &st->warmup_steps, path, error) || !get_dbl (o, "lr", &st->lr, path, error) ||
      !get_dbl (o, "weight_decay", &st->weight_decay, path, error) || !get_dbl (o, "beta1", &st->beta1, path, error) ||
      !get_dbl (o, "beta2", &st->beta2, path, error) || !get_dbl (o, "eps", &st->eps, path, error) ||
      !get_dbl (o, "max_grad_norm", &st->max_grad_norm, path, error) ||
      !get_int (o, "batch_size", &st->batch_size, path, error) || !get_int (o, "seq_len", &st->seq_len, path, error) ||
      !get_int (o, "grad_accum", &st->grad_accum, path, error) ||
      !get_dbl (o, "elapsed_s", &st->elapsed_s, path, error) ||
      !get_dbl (o, "tokens_seen", &st->tokens_seen, path, error))
    return FALSE;
  if (!seed || st->global_step < 0 || ce < 0 || ci < 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: bad seed, step or cursor", path);
      return FALSE;
    }
  st->seed = g_ascii_strtoull (seed, NULL, 10);
  st->cursor.epoch = (guint64) ce;
  st->cursor.index = (guint64) ci;
  st->lr_scheduler = g_strdup (json_object_get_string_member_with_default (o, "lr_scheduler", "linear"));
  st->optimizer = g_strdup (json_object_get_string_member_with_default (o, "optimizer", "adamw"));
  st->lora = json_object_get_boolean_member_with_default (o, "lora", FALSE);
  /* absent in checkpoints from before QLoRA: an unquantized base */
  st->quantization = g_strdup (json_object_get_string_member_with_default (o, "quantization", "none"));
  /* early-stopping state; absent in checkpoints from before evaluation existed */
  st->best_eval_loss = NAN;
  if (json_object_has_member (o, "best_eval_loss") &&
      !hn_json_node_get_double (json_object_get_member (o, "best_eval_loss"), &st->best_eval_loss))
    st->best_eval_loss = NAN;
  if (json_object_has_member (o, "evals_since_best") &&
      (!hn_json_node_get_int (json_object_get_member (o, "evals_since_best"), &st->evals_since_best) ||
       st->evals_since_best < 0))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: 'evals_since_best' is not a count", path);
      return FALSE;
    }
  /* absent before --precision fp16: every step ran an update, in fp32 */
  st->optimizer_steps = st->global_step;
  if (json_object_has_member (o, "optimizer_steps") &&
      (!hn_json_node_get_int (json_object_get_member (o, "optimizer_steps"), &st->optimizer_steps) ||
       st->optimizer_steps < 0 || st->optimizer_steps > st->global_step))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: 'optimizer_steps' is not a count up to global_step", path);
      return FALSE;
    }
  st->precision = g_strdup (json_object_get_string_member_with_default (o, "precision", "fp32"));
  if (g_strcmp0 (st->precision, "fp16") == 0 &&
      (!get_dbl (o, "loss_scale", &st->loss_scale, path, error) ||
       !get_int (o, "loss_scale_growth_tracker", &st->loss_scale_growth_tracker, path, error)))
    return FALSE;
  if (g_strcmp0 (st->precision, "fp16") == 0 && (!(st->loss_scale > 0) || !isfinite (st->loss_scale) ||
                                                  st->loss_scale_growth_tracker < 0))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: bad loss scale", path);
      return FALSE;
    }
  return TRUE;
}
