/* Hierarchos model folders: recognising one, making a fresh one from a
 * tokenizer, and reading plain text files into one token stream. */
#include "hierarchos/hierarchos-private.h"
#include "base/hn-error.h"
#include "base/hn-util.h"
#include "base/json-util.h"
#include "tokenizer/tokenizer.h"

#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

gboolean
hn_hier_is_model_dir (const char *dir)
{
  if (!dir)
    return FALSE;
  g_autofree char *cp = g_build_filename (dir, HN_HIER_CONFIG_FILE, NULL);
  g_autoptr (JsonParser) p = json_parser_new ();
  if (!hn_json_parser_load_file (p, cp, HN_MAX_CONFIG_BYTES, "model config", NULL))
    return FALSE;
  JsonNode *r = json_parser_get_root (p);
  if (!r || !JSON_NODE_HOLDS_OBJECT (r))
    return FALSE;
  JsonNode *mt = json_object_get_member (json_node_get_object (r), "model_type");
  return mt && json_node_get_value_type (mt) == G_TYPE_STRING && strcmp (json_node_get_string (mt), "hierarchos") == 0;
}

HnHierModel *
hn_hier_init_model_dir (const char *tokenizer_path, const char *out_dir, gint64 context_dim,
                        const char *const *overrides, guint64 seed, GError **error)
{
  g_autoptr (HnTokenizer) tok = hn_tokenizer_load (tokenizer_path, error);
  if (!tok)
    return NULL;
  gint64 vocab = hn_tokenizer_get_vocab_size (tok);
  HnHierConfig cfg;
  hn_hier_config_init_defaults (&cfg, vocab, context_dim);
  /* Overrides, then the width-dependent defaults (head sizes, adapter rank,
   * commitment threshold) follow the widths, then the overrides again so an
   * explicit setting of a derived field wins. */
  for (int pass = 0; pass < 2; pass++)
    {
      for (int i = 0; overrides && overrides[i]; i++)
        {
          g_auto (GStrv) kv = g_strsplit (overrides[i], "=", 2);
          if (!kv[0] || !kv[1])
            {
              hn_hier_config_clear (&cfg);
              g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "architecture setting '%s' is not NAME=VALUE",
                           overrides[i]);
              return NULL;
            }
          if (!hn_hier_config_set (&cfg, kv[0], kv[1], error))
            {
              hn_hier_config_clear (&cfg);
              return NULL;
            }
        }
      if (pass == 0)
        hn_hier_config_derive (&cfg);
    }
  if (cfg.vocab_size != vocab)
    {
      hn_hier_config_clear (&cfg);
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "vocab_size must be the tokenizer's (%" G_GINT64_FORMAT ")", vocab);
      return NULL;
    }
  HnHierModel *m = hn_hier_model_new (&cfg, error);
  hn_hier_config_clear (&cfg);
  if (!m)
    return NULL;
  hn_hier_model_init_weights (m, seed);
  g_autofree char *tok_dir = g_file_test (tokenizer_path, G_FILE_TEST_IS_DIR) ? g_strdup (tokenizer_path)
                                                                            : g_path_get_dirname (tokenizer_path);
  if (out_dir && (!hn_hier_model_save (m, out_dir, error) || !hn_hier_copy_tokenizer_files (tok_dir, out_dir, error)))
    {
      hn_hier_model_free (m);
      return NULL;
    }
  return m;
}

GArray *
hn_hier_load_training_tokens (const char *const *files, const char *tokenizer_path, GError **error)
{
  g_autoptr (HnTokenizer) tok = hn_tokenizer_load (tokenizer_path, error);
  if (!tok)
    return NULL;
  g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
  for (int i = 0; files && files[i]; i++)
    {
      const char *f = files[i];
      g_autofree char *text = NULL;
      gsize len = 0;
      if (!hn_file_read_bounded (f, HN_MAX_TEXT_BYTES, "text file", &text, &len, error))
        return NULL;
      gsize at = 0;
      const char *why = hn_utf8_problem (text, len, &at);
      if (why)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s at byte %zu", f, why, at);
          return NULL;
        }
      if (!hn_tokenizer_encode (tok, text, (gssize) len, TRUE, ids, error))
        return NULL;
    }
  GArray *out = g_array_sized_new (FALSE, FALSE, sizeof (guint32), ids->len);
  for (guint i = 0; i < ids->len; i++)
    {
      guint32 v = (guint32) g_array_index (ids, int32_t, i);
      g_array_append_val (out, v);
    }
  return out;
}
