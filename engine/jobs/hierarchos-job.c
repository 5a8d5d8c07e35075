/* Hierarchos job kinds: "hierarchos-train" (fresh from a tokenizer, or
 * continuing a model folder) and "hierarchos-finetune" (fresh model folders
 * and plain-text loading are hierarchos/hierarchos-folder.c). */
#include "jobs/hierarchos-job.h"
#include "base/hn-error.h"
#include "base/hn-folder.h"
#include "base/json-util.h"
#include "base/hn-util.h"
#include "data/dataset.h"
#include "jobs/hub-job.h"
#include "tokenizer/tokenizer.h"
#include "tensor/optim.h"

#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

static gboolean
is_structured (const char *const *files)
{
  for (int i = 0; files && files[i]; i++)
    if (!g_str_has_suffix (files[i], ".txt"))
      return TRUE;
  return FALSE;
}

/* JSONL / JSON / Parquet (and anything not .txt) through the dataset layer:
 * one padded row of row_len + 1 tokens per example, with its labels (-100 =
 * no loss, e.g. masked prompts) and loss weights. */
static gboolean
load_dataset_rows (const char *const *files, const char *tokenizer_path, int row_len, GCancellable *cancel,
                   GArray *tokens, GArray *labels, GArray *weights, GError **error)
{
  g_autoptr (HnTokenizer) tok = hn_tokenizer_load (tokenizer_path, error);
  if (!tok)
    return FALSE;
  int32_t pad = hn_tokenizer_get_pad_id (tok);
  if (pad < 0)
    pad = MAX (hn_tokenizer_get_eos_id (tok), 0);
  for (int f = 0; files[f]; f++)
    {
      HnDatasetOptions opts;
      hn_dataset_options_init (&opts);
      opts.seq_len = (guint) row_len;
      opts.cancellable = cancel;
      g_autoptr (HnDataset) ds = hn_dataset_load (files[f], tok, &opts, error);
      if (!ds)
        return FALSE;
      for (gsize e = 0; e < hn_dataset_get_n_examples (ds); e++)
        {
          HnExample ex;
          hn_dataset_get_example (ds, e, &ex);
          for (int j = 0; j <= row_len; j++)
            {
              gboolean in = (guint) j < ex.n_tokens;
              guint32 t = (guint32) (in ? ex.ids[j] : pad);
              gint32 l = in ? ex.labels[j] : -100;
              float w = in && l != -100 ? (ex.weights ? ex.weights[j] : 1.0f) : 0.0f;
              g_array_append_val (tokens, t);
              g_array_append_val (labels, l);
              g_array_append_val (weights, w);
            }
        }
    }
  return TRUE;
}

/* ---- the train / finetune kinds ---- */

typedef struct {
  HnJob *job;
  gint64 total;
} MetricCtx;

static void
emit_metric (const char *line, gpointer data)
{
  MetricCtx *mc = data;
  g_autoptr (JsonParser) p = json_parser_new ();
  if (!hn_json_parser_load (p, line, -1, "metric line", NULL) || !JSON_NODE_HOLDS_OBJECT (json_parser_get_root (p)))
    return;
  JsonObject *o = json_node_get_object (json_parser_get_root (p));
  HnJobMetric m;
  hn_job_metric_init (&m);
  m.step = json_object_get_int_member (o, "step");
  m.epoch = json_object_get_double_member (o, "epoch");
  m.loss = json_object_get_double_member (o, "loss");
  m.lr = json_object_get_double_member (o, "lr");
  m.grad_norm = json_object_get_double_member (o, "grad_norm");
  m.tokens_per_s = json_object_get_double_member (o, "tokens_per_s");
  m.elapsed_s = json_object_get_double_member (o, "elapsed_s");
  hn_job_emit_metric (mc->job, &m);
  hn_job_emit_progress (mc->job, HN_PROGRESS_STEPS, m.step, mc->total, -1);
}

gboolean
hn_hier_job_options_read (HnJobSpec *spec, HnHierJobOptions *o, GError **error)
{
  memset (o, 0, sizeof *o);
  o->kind = hn_job_spec_get_kind (spec);
  o->finetune = g_str_equal (o->kind, "hierarchos-finetune");
  HnHierTrainOptions *t = &o->train;
  hn_hier_train_options_defaults (t);
  t->finetune = o->finetune;
  t->out_dir = hn_job_spec_get_string (spec, "out-dir");
  t->resume_from = hn_job_spec_get_string (spec, "resume-from-checkpoint");
  t->metrics_file = hn_job_spec_get_string (spec, "metrics-file");
  t->trainable = hn_job_spec_lookup (spec, "trainable") ? hn_job_spec_get_string (spec, "trainable") : NULL;
  t->batch_size = (int) hn_job_spec_get_int (spec, "batch-size");
  t->accumulation_steps = (int) hn_job_spec_get_int (spec, "grad-accum");
  t->chunk_size = (int) hn_job_spec_get_int (spec, "training-chunk-size");
  t->max_length = (int) hn_job_spec_get_int (spec, "seq-len");
  t->epochs = (int) hn_job_spec_get_int (spec, "epochs");
  t->max_steps = hn_job_spec_get_int (spec, "max-steps");
  t->save_steps = hn_job_spec_get_int (spec, "save-steps");
  t->warmup_steps = hn_job_spec_get_int (spec, "warmup-steps");
  t->lr = hn_job_spec_get_double (spec, "lr");
  t->min_lr = hn_job_spec_get_double (spec, "min-lr");
  t->weight_decay = hn_job_spec_get_double (spec, "weight-decay");
  t->grad_clip = hn_job_spec_get_double (spec, "max-grad-norm");
  t->beta1 = hn_job_spec_get_double (spec, "beta1");
  t->beta2 = hn_job_spec_get_double (spec, "beta2");
  t->eps = hn_job_spec_get_double (spec, "eps");
  t->seed = (guint64) hn_job_spec_get_int (spec, "seed");
  t->no_shuffle = hn_job_spec_get_bool (spec, "no-shuffle");
  HnLrScheduleKind sk = HN_LR_COSINE;
  if (!hn_lr_schedule_kind_from_string (hn_job_spec_get_string (spec, "lr-scheduler"), &sk, error))
    return FALSE;
  t->lr_schedule = sk;
  o->optimizer = hn_job_spec_get_string (spec, "optimizer");
  o->precision = hn_job_spec_get_string (spec, "precision");
  hn_hier_runtime_options_read (spec, &o->runtime);
  o->cpu = g_strcmp0 (o->runtime.runtime, "cpu") == 0;
  o->model_given = hn_job_spec_is_set (spec, "model-path") ||
                   (hn_job_spec_lookup (spec, "hf-model") && hn_job_spec_is_set (spec, "hf-model"));
  o->overwrite_output_dir = hn_job_spec_get_bool (spec, "overwrite-output-dir");
  /* the geometry of a fresh model: only hierarchos-train has these, and only a value > 0 set by the user counts */
  gint64 *geo[] = { &o->h_hidden, &o->l_hidden, &o->rwkv_head_size, &o->ltm_slots };
  const char *geo_names[] = { "h-hidden", "l-hidden", "rwkv-head-size", "ltm-slots" };
  for (gsize i = 0; i < G_N_ELEMENTS (geo); i++)
    if (hn_job_spec_lookup (spec, geo_names[i]) && hn_job_spec_is_set (spec, geo_names[i]))
      *geo[i] = MAX (0, hn_job_spec_get_int (spec, geo_names[i]));
  if (hn_job_spec_lookup (spec, "context-dim"))
    o->context_dim = hn_job_spec_get_int (spec, "context-dim");
  return TRUE;
}

gboolean
hn_hier_job_options_check (const HnHierJobOptions *o, GError **error)
{
  if (!o->train.out_dir)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: --out-dir is required", o->kind);
      return FALSE;
    }
  if (g_strcmp0 (o->optimizer, "adamw") != 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: only --optimizer adamw is implemented for Hierarchos",
                   o->kind);
      return FALSE;
    }
  if (g_strcmp0 (o->precision, "fp32") != 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%s: --precision %s is not implemented for Hierarchos (both trainers compute and store fp32)", o->kind,
                   o->precision);
      return FALSE;
    }
  return TRUE;
}

HnHierModel *
hn_hier_fresh_model (const HnHierJobOptions *o, const char *tok_path, GError **error)
{
  g_autoptr (GPtrArray) ov = g_ptr_array_new_with_free_func (g_free);
  const struct { const char *key; gint64 v; } geo[] = {
    { "h_hidden", o->h_hidden }, { "l_hidden", o->l_hidden },
    { "rwkv_head_size", o->rwkv_head_size }, { "ltm_slots", o->ltm_slots },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (geo); i++)
    if (geo[i].v > 0)
      g_ptr_array_add (ov, g_strdup_printf ("%s=%" G_GINT64_FORMAT, geo[i].key, geo[i].v));
  gint64 chunk = o->train.chunk_size;
  g_ptr_array_add (ov, g_strdup_printf ("training_chunk_size=%" G_GINT64_FORMAT, chunk));
  g_ptr_array_add (ov, g_strdup_printf ("reference_chunk_len=%" G_GINT64_FORMAT, chunk));
  g_ptr_array_add (ov, NULL);
  return hn_hier_init_model_dir (tok_path, NULL, o->context_dim, (const char *const *) ov->pdata, o->train.seed, error);
}

static gboolean
stop_requested (gpointer job)
{
  return hn_job_save_and_stop_requested (job);
}

static gboolean
run_training (HnJob *job, GError **error)
{
  HnJobSpec *spec = hn_job_get_spec (job);
  HnHierJobOptions jo;
  if (!hn_hier_job_options_read (spec, &jo, error))
    return FALSE;
  const char *kind = jo.kind;
  gboolean finetune = jo.finetune;
  g_autoptr (HnHierModel) m = NULL;
  g_autofree char *tok_path = hn_hub_job_tokenizer_path (job, error);
  if (!tok_path && error && *error)
    return FALSE;
  g_autofree char *model_dir = NULL;
  gboolean fresh = !finetune && !jo.model_given;
  const char *out_dir = jo.train.out_dir;
  const char *resume = jo.train.resume_from;
  if (!hn_hier_job_options_check (&jo, error))
    return FALSE;
  /* The same runtime policy as chat and generate (hn_hier_runtime_choose):
   * never a silent fallback; the log says which runs and why. */
  g_autoptr (HnVkContext) vk_ctx = NULL;
  {
    g_autofree char *why = NULL;
    g_autoptr (GError) local = NULL;
    if (!hn_hier_runtime_choose (&jo.runtime, &vk_ctx, &why, &local))
      {
        g_set_error (error, HN_ERROR, local->code, "%s: Hierarchos Vulkan trainer: %s (--runtime cpu trains on the CPU)",
                     kind, local->message);
        return FALSE;
      }
    hn_job_log (job, HN_LOG_INFO, "Hierarchos training runtime: %s", why);
    if (jo.cpu && jo.runtime.device_index_given)
      hn_job_log (job, HN_LOG_WARNING, "--runtime cpu: --device-index is not used");
  }

  if (resume)
    {
      m = hn_hier_model_load (resume, error);
      model_dir = g_strdup (resume);
    }
  else if (fresh)
    {
      if (!tok_path)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                       "%s: a fresh model needs --tokenizer-path or --hf-tokenizer (or --model-path to continue)", kind);
          return FALSE;
        }
      m = hn_hier_fresh_model (&jo, tok_path, error);
      hn_job_log (job, HN_LOG_INFO, "fresh Hierarchos model: %zu parameters, contract %s", m ? m->n_params : 0,
                  m ? m->contract_sha256 : "-");
    }
  else
    {
      model_dir = hn_hub_job_model_dir (job, error);
      if (!model_dir)
        return FALSE;
      m = hn_hier_model_load (model_dir, error);
    }
  if (!m)
    return FALSE;
  if (!tok_path)
    tok_path = g_strdup (model_dir);
  {
    /* never onto the model or tokenizer being read, nor over another run's files unless asked */
    const HnOutputInput inputs[] = { { "--model-path", resume ? NULL : model_dir }, { "--tokenizer-path", g_strcmp0 (tok_path, resume) ? tok_path : NULL } };
    g_autoptr (GPtrArray) notes = g_ptr_array_new_with_free_func (g_free);
    if (!hn_output_dir_check (out_dir, inputs, G_N_ELEMENTS (inputs), resume,
                              jo.overwrite_output_dir, HN_OUTPUT_WRITE_INTO, notes, error))
      return FALSE;
    for (guint i = 0; i < notes->len; i++)
      hn_job_log (job, HN_LOG_WARNING, "%s", (char *) notes->pdata[i]);
  }

  g_auto (GStrv) files = hn_hub_job_dataset_files (job, error);
  if (!files)
    {
      if (error && !*error)
        g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: --train or --hf-dataset is required", kind);
      return FALSE;
    }
  int row_len = jo.train.max_length;
  g_autoptr (GArray) tokens = NULL;
  g_autoptr (GArray) labels = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autoptr (GArray) weights = g_array_new (FALSE, FALSE, sizeof (float));
  gboolean rows = is_structured ((const char *const *) files);
  if (rows)
    {
      tokens = g_array_new (FALSE, FALSE, sizeof (guint32));
      if (!load_dataset_rows ((const char *const *) files, tok_path, row_len, hn_job_get_cancellable (job), tokens,
                              labels, weights, error))
        return FALSE;
      hn_job_log (job, HN_LOG_INFO, "%u training rows of %d tokens", tokens->len / (row_len + 1), row_len);
    }
  else
    {
      tokens = hn_hier_load_training_tokens ((const char *const *) files, tok_path, error);
      if (!tokens)
        return FALSE;
      hn_job_log (job, HN_LOG_INFO, "%u training tokens", tokens->len);
    }

  HnHierTrainOptions o = jo.train;
  o.tokenizer_dir = g_file_test (tok_path, G_FILE_TEST_IS_DIR) ? tok_path : NULL;
  g_autofree char *tok_dir = o.tokenizer_dir ? NULL : g_path_get_dirname (tok_path);
  if (!o.tokenizer_dir)
    o.tokenizer_dir = tok_dir;
  o.tokens = (const guint32 *) tokens->data;
  o.n_tokens = tokens->len;
  o.separate_rows = rows;
  o.token_labels = rows ? (const gint32 *) labels->data : NULL;
  o.token_weights = rows ? (const float *) weights->data : NULL;
  o.cancellable = hn_job_get_cancellable (job);
  o.vk_ctx = vk_ctx;
  if (vk_ctx)
    {
      /* say how the step's rows run (a group per program when the device
       * cannot hold them all); refuse early when not one row fits */
      int chunk = o.chunk_size > 0 ? o.chunk_size : (int) m->cfg.training_chunk_size;
      int want = o.batch_size * o.accumulation_steps;
      gsize row = 0;
      int per = hn_hier_vk_train_rows (m, vk_ctx, chunk, want, &row, error);
      if (!per)
        return FALSE;
      guint64 mib = ((guint64) per * (2 * row + m->n_params) + m->n_params) * 4 >> 20;
      hn_job_log (job, HN_LOG_INFO, "Vulkan trainer: %d of the step's %d rows per program (chunks of %d tokens), "
                  "%" G_GUINT64_FORMAT " MiB of device buffers", per, want, chunk, mib);
    }
  MetricCtx mc = { job, o.max_steps };
  o.on_metric = emit_metric;
  o.on_metric_data = &mc;
  if (o.chunk_size > 0 && o.max_length % o.chunk_size != 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "%s: --seq-len (%d) must be a multiple of --training-chunk-size (%d)", kind, o.max_length, o.chunk_size);
      return FALSE;
    }
  if (o.chunk_size != m->cfg.training_chunk_size)
    hn_job_log (job, HN_LOG_INFO, "training with chunks of %d tokens (the contract records %" G_GINT64_FORMAT ")",
                o.chunk_size, m->cfg.training_chunk_size);
  g_autofree char *stopped_at = NULL;
  o.stop_requested = stop_requested;
  o.stop_data = job;
  o.stopped_at = &stopped_at;
  double final = 0;
  if (!hn_hier_train (m, &o, &final, error))
    return FALSE;
  if (hn_job_save_and_stop_requested (job))
    {
      if (stopped_at)
        {
          hn_job_set_resume_path (job, stopped_at);
          hn_job_set_output_path (job, stopped_at);
          hn_job_log (job, HN_LOG_INFO, "stopped and saved %s; continue with --resume-from-checkpoint %s", stopped_at,
                      stopped_at);
        }
      else
        hn_job_log (job, HN_LOG_INFO, "stopped before the first step: nothing to save");
      return TRUE;
    }
  hn_job_log (job, HN_LOG_INFO, "final loss %.4f; model saved to %s", final, out_dir);
  hn_job_set_output_path (job, out_dir);
  return TRUE;
}

gboolean
hn_hier_train_job_run (HnJob *job, GError **error)
{
  return run_training (job, error);
}

gboolean
hn_hier_finetune_job_run (HnJob *job, GError **error)
{
  return run_training (job, error);
}
