#include "jobs/export-job.h"
#include "jobs/train-job.h"
#include "base/hn-error.h"

gboolean
hn_export_job_options_read (HnJobSpec *spec, HnExportJobOptions *o, GError **error)
{
  *o = (HnExportJobOptions) {
    .model_path = hn_job_spec_get_string (spec, "model-path"),
    .adapter_path = hn_job_spec_get_string (spec, "lora-adapter-path"),
    .out = hn_job_spec_get_string (spec, "out"),
    .outtype = HN_GGUF_OUT_F16,
    .adapter_only = hn_job_spec_get_bool (spec, "adapter-only"),
  };
  if (!hn_gguf_outtype_from_string (hn_job_spec_get_string (spec, "outtype"), &o->outtype, error))
    return FALSE;
  if (o->adapter_only && !o->adapter_path)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "--adapter-only needs --lora-adapter-path");
      return FALSE;
    }
  return TRUE;
}

gboolean
hn_export_gguf_job_run (HnJob *job, GError **error)
{
  HnExportJobOptions o;
  if (!hn_export_job_options_read (hn_job_get_spec (job), &o, error) || !hn_job_check_cancelled (job, error))
    return FALSE;
  if (o.adapter_only)
    {
      hn_job_log (job, HN_LOG_INFO, "writing the adapter %s as a GGUF adapter", o.adapter_path);
      if (!hn_gguf_export_lora (o.model_path, o.adapter_path, o.out, error))
        return FALSE;
    }
  else
    {
      hn_job_log (job, HN_LOG_INFO, "writing %s%s%s as %s", o.model_path, o.adapter_path ? " + " : "",
                  o.adapter_path ? o.adapter_path : "", hn_gguf_outtype_name (o.outtype));
      if (!hn_gguf_export (o.model_path, o.adapter_path, o.outtype, o.out, error))
        return FALSE;
    }
  hn_job_set_output_path (job, o.out);
  return TRUE;
}

void
hn_merge_job_options_read (HnJobSpec *spec, HnMergeJobOptions *o)
{
  *o = (HnMergeJobOptions) {
    .model_path = hn_job_spec_get_string (spec, "model-path"),
    .adapter_path = hn_job_spec_get_string (spec, "lora-adapter-path"),
    .out_dir = hn_job_spec_get_string (spec, "out-dir"),
    .overwrite = hn_job_spec_get_bool (spec, "overwrite-output-dir"),
  };
}

gboolean
hn_merge_lora_job_run (HnJob *job, GError **error)
{
  HnMergeJobOptions o;
  hn_merge_job_options_read (hn_job_get_spec (job), &o);
  if (!hn_job_check_cancelled (job, error))
    return FALSE;
  g_autoptr (GPtrArray) notes = g_ptr_array_new_with_free_func (g_free);
  gboolean ok = hn_merge_lora_run (o.model_path, o.adapter_path, o.out_dir, o.overwrite, notes, error);
  for (guint i = 0; i < notes->len; i++)
    hn_job_log (job, HN_LOG_WARNING, "%s", (const char *) notes->pdata[i]);
  if (ok)
    hn_job_set_output_path (job, o.out_dir);
  return ok;
}
