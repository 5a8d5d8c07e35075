/* The "export-gguf" and "merge-lora" job kinds (export-job.c; registered in
 * job-builtin.c): a model, with an optional LoRA adapter merged in, written
 * as a GGUF file for llama.cpp / Ollama, or as a normal Hugging Face model
 * folder. Neither needs a device. */
#pragma once
#include "jobs/job.h"
#include "train/gguf-export.h"

G_BEGIN_DECLS

typedef struct {
  const char *model_path;   /* --model-path */
  const char *adapter_path; /* --lora-adapter-path, NULL: none */
  const char *out;          /* --out: the .gguf file */
  HnGgufOutType outtype;    /* --outtype (default f16) */
  gboolean adapter_only;    /* --adapter-only: the adapter alone, as llama.cpp's --lora GGUF */
} HnExportJobOptions;

/* Reads the spec once (the strings are the spec's); fails on a bad
 * --outtype or --adapter-only without --lora-adapter-path. */
gboolean hn_export_job_options_read (HnJobSpec *spec, HnExportJobOptions *o, GError **error);
gboolean hn_export_gguf_job_run (HnJob *job, GError **error);

typedef struct {
  const char *model_path;   /* --model-path */
  const char *adapter_path; /* --lora-adapter-path */
  const char *out_dir;      /* --out-dir, replaced as a whole */
  gboolean overwrite;       /* --overwrite-output-dir */
} HnMergeJobOptions;

void hn_merge_job_options_read (HnJobSpec *spec, HnMergeJobOptions *o);
gboolean hn_merge_lora_job_run (HnJob *job, GError **error);

G_END_DECLS
