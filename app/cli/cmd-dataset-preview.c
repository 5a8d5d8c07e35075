/* `dataset-preview --train FILE --tokenizer DIR [--shape S] [--seq-len N]
 * [--rows N] [--json]`: the first rows of a training file as the trainer will
 * see them — after templating, with the loss-masked part set apart, token
 * counts, and which rows are truncated, dropped or malformed and why — plus
 * the counts for the whole file. */
#include "cli.h"
#include "data/dataset.h"
#include "tokenizer/tokenizer.h"
#include "base/hn-error.h"
#include "base/hn-util.h"

#include <json-glib/json-glib.h>
#include <stdio.h>
#include <string.h>

int hn_cmd_dataset_preview (int argc, char **argv);

/* One line per segment: newlines and tabs shown as \n and \t. */
static void
print_escaped (const char *s)
{
  for (const char *p = s; *p; p++)
    {
      if (*p == '\n')
        fputs ("\\n", stdout);
      else if (*p == '\t')
        fputs ("\\t", stdout);
      else if (*p == '\r')
        fputs ("\\r", stdout);
      else
        fputc (*p, stdout);
    }
}

static void
add_stats (JsonBuilder *b, const HnDatasetStats *s)
{
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "rows_read");
  json_builder_add_int_value (b, s->rows_read);
  json_builder_set_member_name (b, "rows_used");
  json_builder_add_int_value (b, s->rows_used);
  json_builder_set_member_name (b, "rows_malformed");
  json_builder_add_int_value (b, s->rows_skipped);
  json_builder_set_member_name (b, "rows_truncated");
  json_builder_add_int_value (b, s->rows_truncated);
  json_builder_set_member_name (b, "rows_dropped");
  json_builder_add_int_value (b, s->rows_dropped);
  json_builder_set_member_name (b, "examples");
  json_builder_add_int_value (b, s->n_examples);
  json_builder_set_member_name (b, "tokens");
  json_builder_add_int_value (b, s->n_tokens);
  json_builder_set_member_name (b, "trained_tokens");
  json_builder_add_int_value (b, s->n_target_tokens);
  json_builder_set_member_name (b, "first_malformed");
  if (s->first_skip_reason[0])
    json_builder_add_string_value (b, s->first_skip_reason);
  else
    json_builder_add_null_value (b);
  json_builder_set_member_name (b, "first_dropped");
  if (s->first_drop_reason[0])
    json_builder_add_string_value (b, s->first_drop_reason);
  else
    json_builder_add_null_value (b);
  json_builder_end_object (b);
}

static void
add_row (JsonBuilder *b, const HnDatasetPreviewRow *r)
{
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "line");
  json_builder_add_int_value (b, r->line);
  json_builder_set_member_name (b, "malformed");
  json_builder_add_boolean_value (b, r->malformed);
  json_builder_set_member_name (b, "truncated");
  json_builder_add_boolean_value (b, r->truncated);
  json_builder_set_member_name (b, "dropped");
  json_builder_add_boolean_value (b, r->dropped);
  json_builder_set_member_name (b, "reason");
  if (r->reason)
    json_builder_add_string_value (b, r->reason);
  else
    json_builder_add_null_value (b);
  json_builder_set_member_name (b, "tokens");
  json_builder_add_int_value (b, r->n_tokens);
  json_builder_set_member_name (b, "tokens_before_truncation");
  json_builder_add_int_value (b, r->n_tokens_full);
  json_builder_set_member_name (b, "trained_tokens");
  json_builder_add_int_value (b, r->n_trained);
  json_builder_set_member_name (b, "segments");
  json_builder_begin_array (b);
  for (guint k = 0; k < r->segments->len; k++)
    {
      const HnDatasetSegment *s = &g_array_index (r->segments, HnDatasetSegment, k);
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "text");
      json_builder_add_string_value (b, s->text);
      json_builder_set_member_name (b, "trained");
      json_builder_add_boolean_value (b, s->trained);
      json_builder_end_object (b);
    }
  json_builder_end_array (b);
  json_builder_end_object (b);
}

int
hn_cmd_dataset_preview (int argc, char **argv)
{
  int status;
  g_autoptr (HnJobSpec) spec = hn_cli_parse_command ("dataset-preview", argc, argv, &status);
  if (!spec)
    return status;
  const char *train = hn_job_spec_get_string (spec, "train"), *tokenizer = hn_job_spec_get_string (spec, "tokenizer-path");
  const char *shape_name = hn_job_spec_get_string (spec, "shape"), *template_file = hn_job_spec_get_string (spec, "chat-template");
  int seq_len = (int) hn_job_spec_get_int (spec, "seq-len"), n_rows = (int) hn_job_spec_get_int (spec, "rows");
  gboolean json = hn_job_spec_get_bool (spec, "json"), no_pack = hn_job_spec_get_bool (spec, "no-pack");
  gboolean no_mask = hn_job_spec_get_bool (spec, "no-mask-prompt"), quick = hn_job_spec_get_bool (spec, "quick");
  GError *error = NULL;

  HnDatasetOptions opts;
  hn_dataset_options_init (&opts);
  if (shape_name && !hn_dataset_shape_from_string (shape_name, &opts.shape, &error))
    return hn_cli_fail (error);
  opts.seq_len = seq_len;
  opts.pack = !no_pack;
  opts.mask_prompt = !no_mask;
  g_autofree char *template_src = NULL;
  if (template_file)
    {
      if (!hn_file_read_bounded (template_file, HN_MAX_TEMPLATE_BYTES, "chat template", &template_src, NULL, &error))
        return hn_cli_fail (error);
      opts.chat_template = template_src;
    }
  g_autoptr (HnTokenizer) tok = hn_tokenizer_load (tokenizer, &error);
  if (!tok)
    return hn_cli_fail (error);

  HnDatasetStats shown;
  g_autoptr (GPtrArray) rows = hn_dataset_preview (train, tok, &opts, n_rows, &shown, &error);
  if (!rows)
    return hn_cli_fail (error);

  /* counts for the whole file, with malformed rows skipped (and counted) */
  HnDatasetStats whole = shown;
  g_autofree char *whole_error = NULL;
  if (!quick)
    {
      opts.on_error = HN_DATASET_ON_ERROR_SKIP;
      g_autoptr (GError) e2 = NULL;
      g_autoptr (HnDataset) ds = hn_dataset_load (train, tok, &opts, &e2);
      if (ds)
        whole = *hn_dataset_get_stats (ds);
      else
        whole_error = g_strdup (e2->message);
    }
  const char *shape = hn_dataset_shape_to_string (shown.shape);
  gboolean detected = opts.shape == HN_DATASET_SHAPE_AUTO;

  if (json)
    {
      g_autoptr (JsonBuilder) b = json_builder_new ();
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "file");
      json_builder_add_string_value (b, train);
      json_builder_set_member_name (b, "shape");
      json_builder_add_string_value (b, shape);
      json_builder_set_member_name (b, "shape_detected");
      json_builder_add_boolean_value (b, detected);
      json_builder_set_member_name (b, "seq_len");
      json_builder_add_int_value (b, seq_len);
      json_builder_set_member_name (b, "packed");
      json_builder_add_boolean_value (b, shown.shape == HN_DATASET_SHAPE_TEXT && (opts.pack || g_str_has_suffix (train, ".txt")));
      json_builder_set_member_name (b, "shown");
      add_stats (b, &shown);
      json_builder_set_member_name (b, "whole_file");
      if (quick)
        json_builder_add_null_value (b);
      else if (whole_error)
        {
          json_builder_begin_object (b);
          json_builder_set_member_name (b, "error");
          json_builder_add_string_value (b, whole_error);
          json_builder_end_object (b);
        }
      else
        add_stats (b, &whole);
      json_builder_set_member_name (b, "rows");
      json_builder_begin_array (b);
      for (guint k = 0; k < rows->len; k++)
        add_row (b, rows->pdata[k]);
      json_builder_end_array (b);
      json_builder_end_object (b);
      g_autoptr (JsonNode) root = json_builder_get_root (b);
      g_autofree char *s = json_to_string (root, TRUE);
      printf ("%s\n", s);
      return 0;
    }

  printf ("File:     %s\n", train);
  printf ("Shape:    %s (%s)\n", shape, detected ? "detected" : "given");
  printf ("Seq len:  %d (an example holds up to %d tokens)%s\n", seq_len, seq_len + 1,
          shown.shape == HN_DATASET_SHAPE_TEXT && (opts.pack || g_str_has_suffix (train, ".txt"))
            ? "; text is packed into full sequences" : "");
  if (quick)
    printf ("Counts for the rows shown only (--quick).\n");
  else if (whole_error)
    printf ("Whole file: %s\n", whole_error);
  else
    {
      printf ("Rows:     %" G_GUINT64_FORMAT " read, %" G_GUINT64_FORMAT " used, %" G_GUINT64_FORMAT
              " malformed, %" G_GUINT64_FORMAT " truncated, %" G_GUINT64_FORMAT " dropped\n",
              whole.rows_read, whole.rows_used, whole.rows_skipped, whole.rows_truncated, whole.rows_dropped);
      printf ("Tokens:   %" G_GUINT64_FORMAT " in %" G_GUINT64_FORMAT " examples, %" G_GUINT64_FORMAT " trained\n",
              whole.n_tokens, whole.n_examples, whole.n_target_tokens);
      if (whole.first_skip_reason[0])
        printf ("First malformed row: %s\n  (training stops there unless malformed rows are skipped)\n",
                whole.first_skip_reason);
      if (whole.first_drop_reason[0])
        printf ("First dropped row:   %s\n", whole.first_drop_reason);
    }
  printf ("Legend:   [prompt] no loss (masked)   [train ] the model learns these tokens\n");
  const char *unit = g_str_has_suffix (train, ".parquet") ? "row" : g_str_has_suffix (train, ".json") ? "element" : "line";
  for (guint k = 0; k < rows->len; k++)
    {
      const HnDatasetPreviewRow *r = rows->pdata[k];
      if (r->line)
        printf ("\n#%u, %s %" G_GUINT64_FORMAT, k + 1, unit, r->line);
      else
        printf ("\n#%u, the whole file", k + 1);
      if (r->malformed)
        {
          printf (": MALFORMED: %s\n", r->reason);
          continue;
        }
      printf (": %u tokens, %u trained", r->n_tokens, r->n_trained);
      if (r->dropped)
        printf (" — DROPPED: %s", r->reason);
      else if (r->truncated)
        printf (" — TRUNCATED: %s", r->reason);
      printf ("\n");
      for (guint j = 0; j < r->segments->len; j++)
        {
          const HnDatasetSegment *s = &g_array_index (r->segments, HnDatasetSegment, j);
          fputs (s->trained ? "  [train ] " : "  [prompt] ", stdout);
          print_escaped (s->text);
          fputc ('\n', stdout);
        }
    }
  return 0;
}
