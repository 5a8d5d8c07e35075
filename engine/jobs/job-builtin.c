/* The one place where engine areas plug their job kinds in: add a line
 *     hn_job_register_kind ("KIND", your_run_function);
 * below (and include your area's header). Kinds not listed fail closed with
 * HN_ERROR_UNSUPPORTED when a job of that kind is started. */
#include "jobs/job.h"
#include "jobs/hub-job.h"
#include "jobs/generate-job.h"
#include "jobs/hierarchos-job.h"
#include "jobs/train-job.h"
#include "jobs/evaluate-job.h"
#include "jobs/export-job.h"

void
hn_job_register_builtin_kinds (void)
{
  static gsize once = 0;
  if (g_once_init_enter (&once))
    {
      hn_job_register_kind ("pull", hn_hub_pull_job_run);
      hn_job_register_kind ("hub-search", hn_hub_search_job_run);
      hn_job_register_kind ("transformer-generate", hn_transformer_generate_job_run);
      hn_job_register_kind ("hierarchos-train", hn_hier_train_job_run);
      hn_job_register_kind ("hierarchos-finetune", hn_hier_finetune_job_run);
      /* Transformer decoders; Hierarchos model folders go on to hn_hier_chat_job_run */
      hn_job_register_kind ("chat", hn_chat_job_run);
      hn_job_register_kind ("transformer-train", hn_train_job_run);
      hn_job_register_kind ("transformer-finetune", hn_train_job_run);
      hn_job_register_kind ("evaluate", hn_evaluate_job_run);
      hn_job_register_kind ("export-gguf", hn_export_gguf_job_run);
      hn_job_register_kind ("merge-lora", hn_merge_lora_job_run);
      g_once_init_leave (&once, 1);
    }
}
