/* The chat job with a Transformer decoder: a tiny random Qwen3 model with
 * the real Qwen3 tokenizer and chat template. The rendered prompt ids match
 * transformers' apply_chat_template (the parity fixture), the conversation
 * is carried across turns, and greedy replies are the tokens
 * transformer-generate gives for the same rendered prompt. */
#include "jobs/generate-job.h"
#include "base/hn-error.h"
#include "formats/safetensors.h"
#include "jobs/job.h"

#include <glib/gstdio.h>
#include <string.h>

#define V 151936
#define H 16
#define FF 32
#define HD 8

typedef struct {
  GString *cur, *cur_ids;
  GPtrArray *replies, *reply_ids; /* per turn: text, and ids as "a,b,c" */
  GString *logs;
  int n_tokens;
} Events;

static void
on_event (HnJob *job, const HnJobEvent *e, gpointer data)
{
  Events *ev = data;
  if (e->type == HN_JOB_EVENT_TOKEN)
    {
      g_string_append (ev->cur, e->token.text);
      if (e->token.token_id >= 0)
        {
          g_string_append_printf (ev->cur_ids, "%s%d", ev->cur_ids->len ? "," : "", e->token.token_id);
          ev->n_tokens++;
        }
    }
  else if (e->type == HN_JOB_EVENT_TURN_END)
    {
      g_ptr_array_add (ev->replies, g_strdup (ev->cur->str));
      g_ptr_array_add (ev->reply_ids, g_strdup (ev->cur_ids->str));
      g_string_truncate (ev->cur, 0);
      g_string_truncate (ev->cur_ids, 0);
    }
  else if (e->type == HN_JOB_EVENT_LOG)
    g_string_append_printf (ev->logs, "%s\n", e->log.message);
}

static void
events_init (Events *e)
{
  e->cur = g_string_new (NULL);
  e->cur_ids = g_string_new (NULL);
  e->replies = g_ptr_array_new_with_free_func (g_free);
  e->reply_ids = g_ptr_array_new_with_free_func (g_free);
  e->logs = g_string_new (NULL);
  e->n_tokens = 0;
}

static void
events_clear (Events *e)
{
  g_string_free (e->cur, TRUE);
  g_string_free (e->cur_ids, TRUE);
  g_ptr_array_unref (e->replies);
  g_ptr_array_unref (e->reply_ids);
  g_string_free (e->logs, TRUE);
}

static gboolean
run_job (const char *const *argv, const char *const *inputs, Events *e, GError **error)
{
  g_autoptr (HnJobSpec) spec = hn_job_spec_new_from_argv ((int) g_strv_length ((char **) argv), argv, error);
  if (!spec || !hn_job_spec_validate (spec, error))
    return FALSE;
  g_autoptr (HnJob) job = hn_job_new (spec);
  hn_job_set_event_func (job, on_event, e, NULL);
  for (int i = 0; inputs && inputs[i]; i++)
    hn_job_push_input (job, inputs[i]);
  hn_job_close_input (job);
  return hn_job_run_sync (job, error);
}

static void
add_random (HnSafetensorsWriter *w, const char *name, gint64 rows, gint64 cols, float scale, guint32 *state)
{
  gsize n = (gsize) (rows * MAX (cols, 1));
  g_autofree float *x = g_new (float, n);
  for (gsize i = 0; i < n; i++)
    {
      *state = *state * 1664525u + 1013904223u;
      x[i] = scale < 0 ? 1.0f : scale * ((float) (*state >> 8) / 16777216.0f - 0.5f);
    }
  gint64 shape[2] = { rows, cols };
  g_assert_true (hn_safetensors_writer_add (w, name, HN_ST_DTYPE_F32, cols > 0 ? 2 : 1,
                                            cols > 0 ? shape : &rows, x, n * sizeof (float), TRUE, NULL));
}

static void
copy_file (const char *from_dir, const char *to_dir, const char *name, gboolean drop_template)
{
  g_autofree char *src = g_build_filename (from_dir, name, NULL), *dst = g_build_filename (to_dir, name, NULL);
  g_autofree char *text = NULL;
  gsize len;
  g_assert_true (g_file_get_contents (src, &text, &len, NULL));
  if (drop_template)
    {
      g_autoptr (JsonParser) p = json_parser_new ();
      g_assert_true (json_parser_load_from_data (p, text, (gssize) len, NULL));
      json_object_remove_member (json_node_get_object (json_parser_get_root (p)), "chat_template");
      g_autoptr (JsonGenerator) g = json_generator_new ();
      json_generator_set_root (g, json_parser_get_root (p));
      g_free (text);
      text = json_generator_to_data (g, &len);
    }
  g_assert_true (g_file_set_contents (dst, text, (gssize) len, NULL));
}

/* A one-layer Qwen3 with Qwen3's vocabulary and tokenizer (random weights). */
static char *
make_model (gboolean drop_template)
{
  char *dir = g_dir_make_tmp ("hn-chat-XXXXXX", NULL);
  g_autofree char *cfg = g_strdup_printf (
    "{\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3\", \"vocab_size\": %d,"
    " \"hidden_size\": %d, \"intermediate_size\": %d, \"num_hidden_layers\": 1, \"num_attention_heads\": 2,"
    " \"num_key_value_heads\": 1, \"head_dim\": %d, \"hidden_act\": \"silu\", \"max_position_embeddings\": 256,"
    " \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0, \"tie_word_embeddings\": false, \"eos_token_id\": 151645,"
    " \"attention_bias\": false, \"dtype\": \"float32\"}", V, H, FF, HD);
  g_autofree char *cfg_path = g_build_filename (dir, "config.json", NULL);
  g_assert_true (g_file_set_contents (cfg_path, cfg, -1, NULL));
  g_autoptr (HnSafetensorsWriter) w = hn_safetensors_writer_new ();
  guint32 st = 7;
  add_random (w, "model.embed_tokens.weight", V, H, 2.0f, &st);
  add_random (w, "lm_head.weight", V, H, 2.0f, &st); /* untied: tied random weights echo the last token */
  add_random (w, "model.norm.weight", H, 0, -1, &st);
  add_random (w, "model.layers.0.input_layernorm.weight", H, 0, -1, &st);
  add_random (w, "model.layers.0.post_attention_layernorm.weight", H, 0, -1, &st);
  add_random (w, "model.layers.0.self_attn.q_norm.weight", HD, 0, -1, &st);
  add_random (w, "model.layers.0.self_attn.k_norm.weight", HD, 0, -1, &st);
  add_random (w, "model.layers.0.self_attn.q_proj.weight", 2 * HD, H, 0.5f, &st);
  add_random (w, "model.layers.0.self_attn.k_proj.weight", HD, H, 0.5f, &st);
  add_random (w, "model.layers.0.self_attn.v_proj.weight", HD, H, 0.5f, &st);
  add_random (w, "model.layers.0.self_attn.o_proj.weight", H, 2 * HD, 0.5f, &st);
  add_random (w, "model.layers.0.mlp.gate_proj.weight", FF, H, 0.5f, &st);
  add_random (w, "model.layers.0.mlp.up_proj.weight", FF, H, 0.5f, &st);
  add_random (w, "model.layers.0.mlp.down_proj.weight", H, FF, 0.5f, &st);
  g_autofree char *st_path = g_build_filename (dir, "model.safetensors", NULL);
  g_assert_true (hn_safetensors_writer_write_file (w, st_path, NULL));
  g_autofree char *tok = g_build_filename (g_getenv ("HN_SHARED_DIR"), "tokenizers", "qwen3", NULL);
  copy_file (tok, dir, "tokenizer.json", FALSE);
  copy_file (tok, dir, "tokenizer_config.json", drop_template);
  return dir;
}

static void
rm_model (const char *dir)
{
  const char *files[] = { "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json" };
  for (gsize i = 0; i < G_N_ELEMENTS (files); i++)
    {
      g_autofree char *p = g_build_filename (dir, files[i], NULL);
      g_unlink (p);
    }
  g_rmdir (dir);
}

static char *
ids_csv (const GArray *ids)
{
  GString *s = g_string_new (NULL);
  for (guint i = 0; i < ids->len; i++)
    g_string_append_printf (s, "%s%d", i ? "," : "", g_array_index (ids, int32_t, i));
  return g_string_free (s, FALSE);
}

/* transformer-generate's greedy ids for a prompt given as ids. */
static char *
generate_ids (const char *model, const char *prompt_csv)
{
  const char *argv[] = { "generate", "--model-path", model, "--input-ids", prompt_csv, "--max-new-tokens", "6",
                         "--do-sample=false", NULL };
  Events ev;
  events_init (&ev);
  GError *error = NULL;
  g_assert_true (run_job (argv, NULL, &ev, &error));
  g_assert_no_error (error);
  /* generate has no turns: its streamed ids are all in cur_ids */
  char *out = g_strdup (ev.cur_ids->str);
  events_clear (&ev);
  return out;
}

static JsonNode *
messages (const char *const *pairs)
{
  JsonArray *a = json_array_new ();
  for (int i = 0; pairs[i]; i += 2)
    {
      JsonObject *m = json_object_new ();
      json_object_set_string_member (m, "role", pairs[i]);
      json_object_set_string_member (m, "content", pairs[i + 1]);
      json_array_add_object_element (a, m);
    }
  JsonNode *n = json_node_new (JSON_NODE_ARRAY);
  json_node_take_array (n, a);
  return n;
}

static char *
render_csv (HnChatTemplate *t, HnTokenizer *tok, const char *const *pairs)
{
  g_autoptr (JsonNode) m = messages (pairs);
  g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
  GError *error = NULL;
  g_assert_true (hn_chat_render_ids (t, tok, m, ids, &error));
  g_assert_no_error (error);
  return ids_csv (ids);
}

/* The rendered ids of the fixture's conversations equal transformers'. */
static void
test_render_parity (void)
{
  g_autofree char *path = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "parity",
                                            "chat_template", "qwen3_two_turn.json", NULL);
  g_autoptr (JsonParser) p = json_parser_new ();
  g_assert_true (json_parser_load_from_file (p, path, NULL));
  JsonArray *renders = json_object_get_array_member (json_node_get_object (json_parser_get_root (p)), "renders");
  g_autofree char *tdir = g_build_filename (g_getenv ("HN_SHARED_DIR"), "tokenizers", "qwen3", NULL);
  GError *error = NULL;
  g_autoptr (HnTokenizer) tok = hn_tokenizer_load (tdir, &error);
  g_assert_no_error (error);
  g_autoptr (HnChatTemplate) t = hn_chat_template_new (hn_tokenizer_get_chat_template (tok), &error);
  g_assert_no_error (error);
  int checked = 0;
  for (guint k = 0; k < json_array_get_length (renders); k++)
    {
      JsonObject *r = json_array_get_object_element (renders, k);
      const char *name = json_object_get_string_member (r, "name");
      if (strcmp (name, "two_turn_gen_prompt") != 0 && strcmp (name, "single_user_gen_prompt") != 0)
        continue;
      g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
      g_assert_true (hn_chat_render_ids (t, tok, json_object_get_member (r, "messages"), ids, &error));
      g_assert_no_error (error);
      JsonArray *want = json_object_get_array_member (r, "ids");
      g_assert_cmpuint (ids->len, ==, json_array_get_length (want));
      for (guint i = 0; i < ids->len; i++)
        g_assert_cmpint (g_array_index (ids, int32_t, i), ==, json_array_get_int_element (want, i));
      checked++;
    }
  g_assert_cmpint (checked, ==, 2);
}

/* Two turns, /reset, and a third: the conversation is carried, and every reply is what
 * transformer-generate gives for the whole rendered conversation. */
static void
test_two_turns (void)
{
  g_autofree char *model = make_model (FALSE);
  const char *argv[] = { "chat", "--model-path", model, "--system-prompt", "You are helpful.", "--do-sample=false",
                         "--max-new-tokens", "6", NULL };
  const char *inputs[] = { "Hello!", "What is 2+2?", "/reset", "Hello!", NULL };
  Events ev;
  events_init (&ev);
  GError *error = NULL;
  gboolean ok = run_job (argv, inputs, &ev, &error);
  g_assert_no_error (error);
  g_assert_true (ok);
  g_assert_cmpuint (ev.replies->len, ==, 4);
  g_assert_cmpint (ev.n_tokens, >, 0);
  const char *r1 = ev.replies->pdata[0];
  g_test_message ("reply 1: [%s] %s; reply 2: [%s]", r1, (char *) ev.reply_ids->pdata[0], (char *) ev.replies->pdata[1]);

  g_autoptr (HnTokenizer) tok = hn_tokenizer_load (model, &error);
  g_assert_no_error (error);
  g_autoptr (HnChatTemplate) t = hn_chat_template_new (hn_tokenizer_get_chat_template (tok), &error);
  g_assert_no_error (error);
  const char *turn1[] = { "system", "You are helpful.", "user", "Hello!", NULL };
  const char *turn2[] = { "system", "You are helpful.", "user", "Hello!", "assistant", r1, "user", "What is 2+2?", NULL };
  g_autofree char *p1 = render_csv (t, tok, turn1), *p2 = render_csv (t, tok, turn2);
  g_autofree char *g1 = generate_ids (model, p1), *g2 = generate_ids (model, p2);
  g_assert_cmpstr (ev.reply_ids->pdata[0], ==, g1);
  g_assert_cmpstr (ev.reply_ids->pdata[1], ==, g2);
  g_assert_cmpstr (ev.replies->pdata[2], ==, "");           /* /reset */
  g_assert_cmpstr (ev.reply_ids->pdata[3], ==, g1);         /* a fresh conversation */
  g_assert_nonnull (strstr (ev.logs->str, "conversation reset"));
  events_clear (&ev);
  rm_model (model);
}

/* No chat template: a clear error, unless --raw-prompt or --chat-template. */
static void
test_no_template (void)
{
  g_autofree char *model = make_model (TRUE);
  const char *inputs[] = { "Hello!", NULL };
  Events ev;
  events_init (&ev);
  GError *error = NULL;
  const char *argv[] = { "chat", "--model-path", model, "--do-sample=false", "--max-new-tokens", "2", NULL };
  g_assert_false (run_job (argv, inputs, &ev, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "no chat_template"));
  g_assert_nonnull (strstr (error->message, "--raw-prompt"));
  g_clear_error (&error);

  const char *raw[] = { "chat", "--model-path", model, "--raw-prompt", "--do-sample=false", "--max-new-tokens",
                        "2", NULL };
  g_assert_true (run_job (raw, inputs, &ev, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (ev.replies->len, ==, 1);

  g_autofree char *tpath = g_build_filename (model, "t.jinja", NULL);
  g_assert_true (g_file_set_contents (tpath, "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n"
                                      "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}", -1, NULL));
  const char *file[] = { "chat", "--model-path", model, "--chat-template", tpath, "--do-sample=false",
                         "--max-new-tokens", "2", NULL };
  g_assert_true (run_job (file, inputs, &ev, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (ev.replies->len, ==, 2);
  /* where transformers saves a template: chat_template.jinja next to the tokenizer */
  g_autofree char *jinja = g_build_filename (model, "chat_template.jinja", NULL);
  g_assert_cmpint (g_rename (tpath, jinja), ==, 0);
  g_assert_true (run_job (argv, inputs, &ev, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (ev.replies->len, ==, 3);
  g_unlink (jinja);

  const char *hier_only[] = { "chat", "--model-path", model, "--carry-chat-state", NULL };
  g_assert_false (run_job (hier_only, inputs, &ev, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_clear_error (&error);
  events_clear (&ev);
  rm_model (model);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  hn_job_register_builtin_kinds ();
  g_test_add_func ("/chat-job/render-parity", test_render_parity);
  g_test_add_func ("/chat-job/two-turns", test_two_turns);
  g_test_add_func ("/chat-job/no-template", test_no_template);
  return g_test_run ();
}
