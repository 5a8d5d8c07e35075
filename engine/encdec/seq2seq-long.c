/* The encoder-decoders whose encoder does not attend densely, and switch's experts (seq2seq.c runs
 * them; this file reads their configuration and builds their masks and biases on the host):
 * - longt5: local attention (keys within local_radius of the query, T5 buckets of layer 0) and
 *   transient-global attention (plus one key per global_block_size tokens: their summed, normed
 *   states; bucket of the block distance from global_relative_attention_bias). transformers splits
 *   the sequence into blocks of local_radius + 1 and attends over three of them with a -1e4 mask
 *   outside the radius; a dense score row with -inf there gives the same softmax.
 * - pegasus_x: num_global_tokens learned global rows that attend to everything and are seen by every
 *   token, tokens that otherwise see their block_size block only (blocks offset by half a block in
 *   odd layers when stagger_local_blocks). The stream here is [globals | tokens].
 * - led: Longformer's sliding window (attention_window / 2 each side, per layer); without a
 *   global_attention_mask (this API takes none, as transformers' default) no token is global, so
 *   the global projections are not used. transformers pads the input to a multiple of the largest
 *   window with masked tokens, which changes no unpadded row.
 * - switch_transformers: top-1 experts every sparse_step layers (seq2seq.c). transformers 5.17 routes
 *   the flattened tokens with one_hot(argmax) of shape [N, 1, E] and takes the capacity cumsum over
 *   the singleton axis, so in eval no token is dropped while expert_capacity >= 1 (and every one is
 *   when it is < 1): that is what runs here. */
#include "base/hn-error.h"
#include "encdec/seq2seq-private.h"

#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

static gboolean
bad (const HnModelConfig *cfg, const char *what, gint64 v, GError **error)
{
  g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s is missing or out of range (%" G_GINT64_FORMAT ")", cfg->path,
               what, v);
  return FALSE;
}

/* An integer extra of config.json, or `def` when absent; FALSE (error set) when mistyped or out of
 * [lo, 1 << 24). */
static gboolean
get_int (const HnModelConfig *cfg, const char *key, gint64 def, gint64 lo, int *out, GError **error)
{
  gint64 v = def;
  GError *e = NULL;
  if (!hn_model_config_get_int (cfg, key, &v, &e) && e)
    {
      g_propagate_error (error, e);
      return FALSE;
    }
  if (v < lo || v >= (1 << 24))
    return bad (cfg, key, v, error);
  *out = (int) v;
  return TRUE;
}

static gboolean
resolve_led (HnSeq2Seq *m, const HnModelConfig *cfg, GError **error)
{
  CK (get_int (cfg, "max_encoder_position_embeddings", 16384, 1, &m->n_pos_enc, error) &&
      get_int (cfg, "max_decoder_position_embeddings", 1024, 1, &m->n_pos, error));
  JsonNode *aw = json_object_get_member (hn_model_config_get_raw (cfg), "attention_window");
  int n = m->enc.n_layer;
  m->led_window = g_new0 (int, MAX (n, 1));
  for (int il = 0; il < n; il++)
    {
      gint64 w = 512;
      if (aw && JSON_NODE_HOLDS_ARRAY (aw))
        {
          JsonArray *a = json_node_get_array (aw);
          if ((int) json_array_get_length (a) != n)
            return bad (cfg, "attention_window (one per encoder layer)", json_array_get_length (a), error);
          w = json_array_get_int_element (a, il);
        }
      else if (aw && JSON_NODE_HOLDS_VALUE (aw))
        w = json_node_get_int (aw);
      if (w <= 0 || w % 2 || w >= (1 << 24))
        return bad (cfg, "attention_window (positive and even)", w, error);
      m->led_window[il] = (int) (w / 2);
      m->pad_multiple = MAX (m->pad_multiple, (int) w);
    }
  m->enc_attn = S2S_ENC_LED;
  return TRUE;
}

gboolean
hn_s2s_long_resolve (HnSeq2Seq *m, const HnModelConfig *cfg, GError **error)
{
  const char *mt = m->arch->model_type;
  m->enc_attn = S2S_ENC_FULL;
  if (strcmp (mt, "switch_transformers") == 0)
    {
      CK (get_int (cfg, "num_experts", 8, 1, &m->n_experts, error) &&
          get_int (cfg, "expert_capacity", 64, G_MININT32, &m->expert_capacity, error) &&
          get_int (cfg, "encoder_sparse_step", 3, 0, &m->sparse_step[0], error) &&
          get_int (cfg, "decoder_sparse_step", 3, 0, &m->sparse_step[1], error));
      const char *rd = hn_model_config_get_string (cfg, "router_dtype");
      if (rd && strcmp (rd, "float32") != 0)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: switch_transformers router_dtype \"%s\" is not supported (float32 is)",
                       cfg->path, rd);
          return FALSE;
        }
    }
  else if (strcmp (mt, "longt5") == 0)
    {
      const char *t = hn_model_config_get_string (cfg, "encoder_attention_type");
      if (!t || strcmp (t, "local") == 0)
        m->enc_attn = S2S_ENC_LOCAL;
      else if (strcmp (t, "transient-global") == 0)
        m->enc_attn = S2S_ENC_TGLOBAL;
      else
        {
          g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: longt5 encoder_attention_type \"%s\" is not supported",
                       cfg->path, t);
          return FALSE;
        }
      CK (get_int (cfg, "local_radius", 127, 0, &m->local_radius, error) &&
          get_int (cfg, "global_block_size", 16, 1, &m->global_block, error));
    }
  else if (strcmp (mt, "pegasus_x") == 0)
    {
      CK (get_int (cfg, "num_global_tokens", 32, 1, &m->n_global, error) &&
          get_int (cfg, "block_size", 512, 1, &m->block_size, error));
      m->stagger = TRUE;
      GError *e = NULL;
      if (!hn_model_config_get_bool (cfg, "stagger_local_blocks", &m->stagger, &e) && e)
        {
          g_propagate_error (error, e);
          return FALSE;
        }
      m->enc_attn = S2S_ENC_PEGASUS_X;
    }
  else if (strcmp (mt, "led") == 0)
    return resolve_led (m, cfg, error);
  return TRUE;
}

int
hn_s2s_enc_rows (const HnSeq2Seq *m, int S)
{
  return m->enc_attn == S2S_ENC_PEGASUS_X ? m->n_global + S : S;
}

int
hn_s2s_enc_keys (const HnSeq2Seq *m, int S)
{
  return m->enc_attn == S2S_ENC_TGLOBAL ? S + S / m->global_block : hn_s2s_enc_rows (m, S);
}

int *
hn_s2s_longt5_block_ids (const HnSeq2Seq *m, int S)
{
  int G = S / m->global_block;
  int *id = g_new (int, S);
  /* as transformers: floor(1 + (cumsum(1/g) - 1/g) - 1) in f32 (torch's CPU cumsum adds in double),
   * at least -1, orphan tokens past the last full block joining it */
  float inv = 1.0f / (float) m->global_block;
  double acc = 0;
  for (int i = 0; i < S; i++)
    {
      acc += inv;
      float fixed = (float) acc - inv;
      int v = (int) floorf ((1.0f + fixed) - 1.0f);
      id[i] = MIN (MAX (v, -1), G - 1);
    }
  return id;
}

float *
hn_s2s_longt5_bias (const HnSeq2Seq *m, int S)
{
  int H = m->enc.H, K = hn_s2s_enc_keys (m, S), G = K - S, reach = m->local_radius + 1;
  const float *rel = m->enc.l[0].rel, *grel = m->enc.l[0].grel;
  g_autofree int *blk = G ? hn_s2s_longt5_block_ids (m, S) : NULL;
  float *b = g_new (float, (gsize) H * S * K);
  for (int i = 0; i < S; i++)
    for (int j = 0; j < K; j++)
      {
        const float *tab = j < S ? rel : grel;
        int r = j < S ? j - i : (j - S) - blk[i];
        gboolean seen = j >= S || ABS (r) < reach;
        int bk = seen ? hn_t5_relative_bucket (r, TRUE, m->buckets, m->max_distance) : 0;
        for (int h = 0; h < H; h++)
          b[((gsize) h * S + i) * K + j] = seen ? tab[bk * H + h] : -INFINITY;
      }
  return b;
}

float *
hn_s2s_enc_mask (const HnSeq2Seq *m, int il, int S)
{
  int R = hn_s2s_enc_rows (m, S), G = R - S;
  float *mk = g_new (float, (gsize) R * R);
  int w = m->enc_attn == S2S_ENC_LED ? m->led_window[il] : 0, bs = m->block_size;
  int shift = m->enc_attn == S2S_ENC_PEGASUS_X && m->stagger && il % 2 == 1 ? bs / 2 : 0;
  for (int r = 0; r < R; r++)
    for (int c = 0; c < R; c++)
      {
        gboolean seen;
        if (m->enc_attn == S2S_ENC_LED)
          seen = ABS (r - c) <= w;
        else /* pegasus_x: global rows see all; a token sees the globals and its own block */
          seen = r < G || c < G || (r - G + shift) / bs == (c - G + shift) / bs;
        mk[(gsize) r * R + c] = seen ? 0.0f : -INFINITY;
      }
  return mk;
}
