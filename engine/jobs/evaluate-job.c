/* The "evaluate" kind: the perplexity of a Transformer model (with a LoRA
 * adapter merged in) on a text or a dataset; the rules are
 * train/evaluate.h. The result goes out as text (or one JSON object
 * with --json) in TOKEN events, which the CLI prints on stdout. */
#include "jobs/evaluate-job.h"
#include "jobs/hub-job.h"
#include "base/hn-error.h"
#include "train/evaluate.h"

/* The options of the kind, read once (strings belong to the spec). */
typedef struct {
  const char *adapter, *text_file, *eval_file;
  int seq_len;      /* 0 (unset): the model's context */
  int device_index; /* -1: the best device */
  gboolean json;
} EvaluateOptions;

static void
evaluate_options_read (HnJobSpec *spec, EvaluateOptions *o)
{
  o->adapter = hn_job_spec_get_string (spec, "lora-adapter-path");
  o->text_file = hn_job_spec_get_string (spec, "text-file");
  o->eval_file = hn_job_spec_get_string (spec, "eval-file");
  o->seq_len = (int) hn_job_spec_get_int (spec, "seq-len");
  o->device_index = (int) hn_job_spec_get_int (spec, "device-index");
  o->json = hn_job_spec_get_bool (spec, "json");
}

gboolean
hn_evaluate_job_run (HnJob *job, GError **error)
{
  EvaluateOptions o;
  evaluate_options_read (hn_job_get_spec (job), &o);
  if (!o.text_file == !o.eval_file)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "give exactly one of --text-file and --eval-file");
      return FALSE;
    }
  g_autofree char *model_dir = hn_hub_job_model_dir (job, error);
  if (!model_dir)
    return FALSE;
  HnEvalOptions eo;
  hn_eval_options_init (&eo);
  eo.model_dir = model_dir;
  eo.lora_adapter_dir = o.adapter;
  eo.text_file = o.text_file;
  eo.eval_file = o.eval_file;
  eo.seq_len = o.seq_len;
  eo.device_index = o.device_index;
  HnEvalResult res;
  if (!hn_evaluate_run (&eo, &res, hn_job_get_cancellable (job), error))
    return FALSE;
  char ppl[G_ASCII_DTOSTR_BUF_SIZE], nll[G_ASCII_DTOSTR_BUF_SIZE];
  g_ascii_formatd (ppl, sizeof ppl, "%.9g", res.perplexity);
  g_ascii_formatd (nll, sizeof nll, "%.9g", res.mean_nll);
  g_autofree char *text =
    o.json ? g_strdup_printf ("{\"perplexity\": %s, \"mean_nll\": %s, \"tokens\": %" G_GUINT64_FORMAT "}\n", ppl, nll,
                              res.tokens)
           : g_strdup_printf ("perplexity %s\nmean_nll   %s\ntokens     %" G_GUINT64_FORMAT "\n", ppl, nll, res.tokens);
  hn_job_emit_token (job, 0, -1, text);
  return TRUE;
}
