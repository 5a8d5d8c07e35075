/* Masked-LM masking (mlm.h). */
#include "train/mlm.h"

#include <json-glib/json-glib.h>

#include "base/hn-error.h"
#include "base/hn-util.h"
#include "base/json-util.h"

/* tokenizer_config.json's mask_token: a string or an AddedToken object {"content": ...}. */
static char *
config_mask_token (HnTokenizer *tok)
{
  const char *path = hn_tokenizer_get_path (tok);
  g_autofree char *dir = path && g_file_test (path, G_FILE_TEST_IS_DIR) ? g_strdup (path) : g_path_get_dirname (path ? path : ".");
  g_autofree char *cfg = g_build_filename (dir, "tokenizer_config.json", NULL);
  g_autoptr (JsonParser) p = json_parser_new ();
  if (!hn_json_parser_load_file (p, cfg, HN_MAX_CONFIG_BYTES, "tokenizer config", NULL) || !JSON_NODE_HOLDS_OBJECT (json_parser_get_root (p)))
    return NULL;
  JsonNode *n = json_object_get_member (json_node_get_object (json_parser_get_root (p)), "mask_token");
  if (n && JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_STRING)
    return g_strdup (json_node_get_string (n));
  if (n && JSON_NODE_HOLDS_OBJECT (n) && json_object_has_member (json_node_get_object (n), "content"))
    return g_strdup (json_object_get_string_member (json_node_get_object (n), "content"));
  return NULL;
}

gboolean
hn_mlm_masking_init (HnMlmMasking *mm, HnTokenizer *tok, int32_t model_vocab, double probability, GError **error)
{
  *mm = (HnMlmMasking) { 0 };
  g_autofree char *named = config_mask_token (tok);
  const char *const tries[] = { named, "[MASK]", "<mask>" };
  mm->mask_id = -1;
  for (gsize i = 0; i < G_N_ELEMENTS (tries) && mm->mask_id < 0; i++)
    if (tries[i])
      mm->mask_id = hn_tokenizer_token_to_id (tok, tries[i]);
  mm->vocab = MIN (hn_tokenizer_get_vocab_size (tok), model_vocab);
  if (mm->mask_id < 0 || mm->mask_id >= mm->vocab)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%s: the tokenizer has no mask token inside the model's vocabulary (masked-LM training needs one: "
                   "tokenizer_config.json mask_token, [MASK] or <mask>)", hn_tokenizer_get_path (tok));
      return FALSE;
    }
  mm->probability = probability;
  mm->special = g_new0 (guint8, mm->vocab);
  for (int32_t id = 0; id < mm->vocab; id++)
    mm->special[id] = hn_tokenizer_is_special (tok, id);
  mm->special[mm->mask_id] = 1;
  return TRUE;
}

void
hn_mlm_masking_clear (HnMlmMasking *mm)
{
  g_clear_pointer (&mm->special, g_free);
}

gsize
hn_mlm_mask (const HnMlmMasking *mm, HnRng *rng, int32_t *ids, int32_t *labels, gsize n)
{
  gsize chosen = 0;
  for (gsize i = 0; i < n; i++)
    {
      int32_t id = ids[i];
      labels[i] = -100;
      if (id < 0 || id >= mm->vocab || mm->special[id] || hn_rng_uniform (rng) >= mm->probability)
        continue;
      labels[i] = id;
      chosen++;
      if (hn_rng_uniform (rng) < 0.8)
        ids[i] = mm->mask_id;
      else if (hn_rng_uniform (rng) < 0.5) /* half of the remaining 20 % */
        ids[i] = (int32_t) (hn_rng_next (rng) % (guint64) mm->vocab);
    }
  return chosen;
}
