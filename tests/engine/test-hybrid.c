/* Hybrid decoders (attention + Mamba-2 or short-convolution layers, transformer-graph.c) on synthetic
 * bamba, nemotron_h, falcon_h1, lfm2 and lfm2_moe models written here with random weights: a session
 * carries each row's KV cache and recurrent state side by side, so every way through it gives the
 * logits of the full-sequence forward (which runs the states from zero): chunked prefill then one
 * token at a time, the no-cache mode, beam reordering of rows; the paged cache and training fail
 * closed by name. Parity with transformers (and the replayed device step) is
 * test-transformer-parity's (the bamba, lfm2, lfm2_moe, ... fixtures). */
#include "base/hn-error.h"
#include "formats/safetensors.h"
#include "train/train-graph.h"
#include "transformer/transformer.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

static HnVkContext *ctx;

enum { V = 40, C = 16, F = 24, NH = 2, KVH = 1, HD = 8, MH = 4, MP = 8, G = 2, N = 4, K = 3 };
enum { I = MH * MP, GN = G * N, CD = I + 2 * GN, R = I + CD + MH };

static void
add (HnSafetensorsWriter *w, GRand *rng, const char *name, int ndim, const gint64 *shape, float scale, float offset)
{
  gint64 n = 1;
  for (int i = 0; i < ndim; i++)
    n *= shape[i];
  g_autofree float *v = g_new (float, n);
  for (gint64 i = 0; i < n; i++)
    v[i] = offset + scale * (float) g_rand_double_range (rng, -1.0, 1.0);
  GError *error = NULL;
  g_assert_true (hn_safetensors_writer_add (w, name, HN_ST_DTYPE_F32, (guint) ndim, shape, v, sizeof (float) * (gsize) n,
                                            TRUE, &error));
  g_assert_no_error (error);
}

enum { BAMBA, NEMOTRON_H, FALCON_H1, LFM2, LFM2_MOE, QWEN3_5, QWEN3_NEXT };
enum { E = 4, FE = 8 }; /* lfm2_moe's experts and their width */

/* lfm2: short-convolution layers 0 and 2 (with conv_bias), attention with per-head q/k norms in layer 1;
 * intermediate_size 36 becomes F (24) by block_auto_adjust_ff_dim. lfm2_moe: the same layers, layer 0's
 * MLP dense (F wide), layers 1 and 2 routed to 2 of E experts with an expert bias. */
static void
write_lfm2 (HnSafetensorsWriter *w, GRand *rng, gboolean moe)
{
  add (w, rng, "model.embed_tokens.weight", 2, (gint64[]) { V, C }, 0.5f, 0.0f);
  add (w, rng, "lm_head.weight", 2, (gint64[]) { V, C }, 0.3f, 0.0f);
  add (w, rng, "model.embedding_norm.weight", 1, (gint64[]) { C }, 0.1f, 1.0f);
  for (int l = 0; l < 3; l++)
    {
      char nm[128];
#define NM(s) (g_snprintf (nm, sizeof nm, "model.layers.%d.%s", l, s), nm)
      add (w, rng, NM ("operator_norm.weight"), 1, (gint64[]) { C }, 0.1f, 1.0f);
      add (w, rng, NM ("ffn_norm.weight"), 1, (gint64[]) { C }, 0.1f, 1.0f);
      if (moe && l > 0)
        {
          add (w, rng, NM ("feed_forward.gate.weight"), 2, (gint64[]) { E, C }, 0.5f, 0.0f);
          add (w, rng, NM ("feed_forward.expert_bias"), 1, (gint64[]) { E }, 0.3f, 0.0f);
          for (int e = 0; e < E; e++)
            {
              char en[64];
              g_snprintf (en, sizeof en, "feed_forward.experts.%d.w1.weight", e);
              add (w, rng, NM (en), 2, (gint64[]) { FE, C }, 0.4f, 0.0f);
              g_snprintf (en, sizeof en, "feed_forward.experts.%d.w3.weight", e);
              add (w, rng, NM (en), 2, (gint64[]) { FE, C }, 0.4f, 0.0f);
              g_snprintf (en, sizeof en, "feed_forward.experts.%d.w2.weight", e);
              add (w, rng, NM (en), 2, (gint64[]) { C, FE }, 0.4f, 0.0f);
            }
        }
      else
        {
          add (w, rng, NM ("feed_forward.w1.weight"), 2, (gint64[]) { F, C }, 0.3f, 0.0f);
          add (w, rng, NM ("feed_forward.w3.weight"), 2, (gint64[]) { F, C }, 0.3f, 0.0f);
          add (w, rng, NM ("feed_forward.w2.weight"), 2, (gint64[]) { C, F }, 0.3f, 0.0f);
        }
      if (l == 1)
        {
          add (w, rng, NM ("self_attn.q_proj.weight"), 2, (gint64[]) { NH * HD, C }, 0.4f, 0.0f);
          add (w, rng, NM ("self_attn.k_proj.weight"), 2, (gint64[]) { KVH * HD, C }, 0.4f, 0.0f);
          add (w, rng, NM ("self_attn.v_proj.weight"), 2, (gint64[]) { KVH * HD, C }, 0.4f, 0.0f);
          add (w, rng, NM ("self_attn.out_proj.weight"), 2, (gint64[]) { C, NH * HD }, 0.4f, 0.0f);
          add (w, rng, NM ("self_attn.q_layernorm.weight"), 1, (gint64[]) { HD }, 0.1f, 1.0f);
          add (w, rng, NM ("self_attn.k_layernorm.weight"), 1, (gint64[]) { HD }, 0.1f, 1.0f);
          continue;
        }
      add (w, rng, NM ("conv.in_proj.weight"), 2, (gint64[]) { 3 * C, C }, 0.5f, 0.0f);
      add (w, rng, NM ("conv.in_proj.bias"), 1, (gint64[]) { 3 * C }, 0.2f, 0.0f);
      add (w, rng, NM ("conv.conv.weight"), 3, (gint64[]) { C, 1, K }, 0.5f, 0.0f);
      add (w, rng, NM ("conv.conv.bias"), 1, (gint64[]) { C }, 0.1f, 0.0f);
      add (w, rng, NM ("conv.out_proj.weight"), 2, (gint64[]) { C, C }, 0.4f, 0.0f);
      add (w, rng, NM ("conv.out_proj.bias"), 1, (gint64[]) { C }, 0.1f, 0.0f);
#undef NM
    }
}

/* bamba: layers 0 and 2 Mamba-2, layer 1 attention, each with its MLP. nemotron_h ("M*-M"): one
 * mixer per layer, no rotary, the gated norm per group, relu2 MLPs. falcon_h1: attention and Mamba-2
 * side by side in both layers, with muP multipliers. */
/* qwen3_5_text (dense MLPs) / qwen3_next (MoE with a shared expert): gated DeltaNet layers 0 and 2 (1 key head of 8, 2 value
 * heads of 4: conv channels 2 · 8 + 8), gated attention in layer 1. qwen3_next stores in_proj_qkvz /
 * in_proj_ba (one key head: its rows in order q, k, v, z and b, a), qwen3_5 the four projections. */
enum { DK = 8, DHV = 2, DV = 4, DCD = 2 * DK + DHV * DV };
static void
write_qwen3_5 (HnSafetensorsWriter *w, GRand *rng, gboolean fused)
{
  add (w, rng, "model.embed_tokens.weight", 2, (gint64[]) { V, C }, 0.5f, 0.0f);
  add (w, rng, "lm_head.weight", 2, (gint64[]) { V, C }, 0.3f, 0.0f);
  add (w, rng, "model.norm.weight", 1, (gint64[]) { C }, 0.1f, 0.0f);
  for (int l = 0; l < 3; l++)
    {
      char nm[128];
#define NM(s) (g_snprintf (nm, sizeof nm, "model.layers.%d.%s", l, s), nm)
      add (w, rng, NM ("input_layernorm.weight"), 1, (gint64[]) { C }, 0.1f, 0.0f);
      add (w, rng, NM ("post_attention_layernorm.weight"), 1, (gint64[]) { C }, 0.1f, 0.0f);
      if (fused) /* qwen3_next: routed experts and a sigmoid-gated shared expert */
        {
          add (w, rng, NM ("mlp.gate.weight"), 2, (gint64[]) { E, C }, 0.5f, 0.0f);
          for (int e = 0; e < E; e++)
            {
              char en[160];
              g_snprintf (en, sizeof en, "model.layers.%d.mlp.experts.%d.gate_proj.weight", l, e);
              add (w, rng, en, 2, (gint64[]) { FE, C }, 0.3f, 0.0f);
              g_snprintf (en, sizeof en, "model.layers.%d.mlp.experts.%d.up_proj.weight", l, e);
              add (w, rng, en, 2, (gint64[]) { FE, C }, 0.3f, 0.0f);
              g_snprintf (en, sizeof en, "model.layers.%d.mlp.experts.%d.down_proj.weight", l, e);
              add (w, rng, en, 2, (gint64[]) { C, FE }, 0.3f, 0.0f);
            }
          add (w, rng, NM ("mlp.shared_expert.gate_proj.weight"), 2, (gint64[]) { FE, C }, 0.3f, 0.0f);
          add (w, rng, NM ("mlp.shared_expert.up_proj.weight"), 2, (gint64[]) { FE, C }, 0.3f, 0.0f);
          add (w, rng, NM ("mlp.shared_expert.down_proj.weight"), 2, (gint64[]) { C, FE }, 0.3f, 0.0f);
          add (w, rng, NM ("mlp.shared_expert_gate.weight"), 2, (gint64[]) { 1, C }, 0.5f, 0.0f);
        }
      else
        {
          add (w, rng, NM ("mlp.gate_proj.weight"), 2, (gint64[]) { F, C }, 0.3f, 0.0f);
          add (w, rng, NM ("mlp.up_proj.weight"), 2, (gint64[]) { F, C }, 0.3f, 0.0f);
          add (w, rng, NM ("mlp.down_proj.weight"), 2, (gint64[]) { C, F }, 0.3f, 0.0f);
        }
      if (l == 1)
        {
          add (w, rng, NM ("self_attn.q_proj.weight"), 2, (gint64[]) { 2 * NH * HD, C }, 0.4f, 0.0f);
          add (w, rng, NM ("self_attn.k_proj.weight"), 2, (gint64[]) { KVH * HD, C }, 0.4f, 0.0f);
          add (w, rng, NM ("self_attn.v_proj.weight"), 2, (gint64[]) { KVH * HD, C }, 0.4f, 0.0f);
          add (w, rng, NM ("self_attn.o_proj.weight"), 2, (gint64[]) { C, NH * HD }, 0.4f, 0.0f);
          add (w, rng, NM ("self_attn.q_norm.weight"), 1, (gint64[]) { HD }, 0.1f, 0.0f);
          add (w, rng, NM ("self_attn.k_norm.weight"), 1, (gint64[]) { HD }, 0.1f, 0.0f);
          continue;
        }
      if (fused)
        {
          add (w, rng, NM ("linear_attn.in_proj_qkvz.weight"), 2, (gint64[]) { DCD + DHV * DV, C }, 0.5f, 0.0f);
          add (w, rng, NM ("linear_attn.in_proj_ba.weight"), 2, (gint64[]) { 2 * DHV, C }, 0.5f, 0.0f);
        }
      else
        {
          add (w, rng, NM ("linear_attn.in_proj_qkv.weight"), 2, (gint64[]) { DCD, C }, 0.5f, 0.0f);
          add (w, rng, NM ("linear_attn.in_proj_z.weight"), 2, (gint64[]) { DHV * DV, C }, 0.5f, 0.0f);
          add (w, rng, NM ("linear_attn.in_proj_b.weight"), 2, (gint64[]) { DHV, C }, 0.5f, 0.0f);
          add (w, rng, NM ("linear_attn.in_proj_a.weight"), 2, (gint64[]) { DHV, C }, 0.5f, 0.0f);
        }
      add (w, rng, NM ("linear_attn.conv1d.weight"), 3, (gint64[]) { DCD, 1, K }, 0.5f, 0.0f);
      add (w, rng, NM ("linear_attn.A_log"), 1, (gint64[]) { DHV }, 0.5f, 0.0f);
      add (w, rng, NM ("linear_attn.dt_bias"), 1, (gint64[]) { DHV }, 0.5f, 1.0f);
      add (w, rng, NM ("linear_attn.norm.weight"), 1, (gint64[]) { DV }, 0.1f, 1.0f);
      add (w, rng, NM ("linear_attn.out_proj.weight"), 2, (gint64[]) { C, DHV * DV }, 0.4f, 0.0f);
#undef NM
    }
}

static char *
write_model (int family)
{
  gboolean nemotron = family == NEMOTRON_H;
  GError *error = NULL;
  char *dir = g_dir_make_tmp ("hn-hybrid-XXXXXX", &error);
  g_assert_no_error (error);
  const char *cfg = "{\"model_type\": \"bamba\", \"architectures\": [\"BambaForCausalLM\"], \"vocab_size\": 40,"
                    " \"hidden_size\": 16, \"intermediate_size\": 24, \"num_hidden_layers\": 3,"
                    " \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_dim\": 8,"
                    " \"attn_layer_indices\": [1], \"mamba_n_heads\": 4, \"mamba_d_head\": 8, \"mamba_n_groups\": 2,"
                    " \"mamba_d_state\": 4, \"mamba_d_conv\": 3, \"mamba_expand\": 2, \"mamba_conv_bias\": true,"
                    " \"mamba_proj_bias\": false, \"rms_norm_eps\": 1e-5, \"hidden_act\": \"silu\","
                    " \"max_position_embeddings\": 64, \"tie_word_embeddings\": false,"
                    " \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 10000.0,"
                    " \"partial_rotary_factor\": 0.5}, \"bos_token_id\": 1, \"eos_token_id\": 2, \"pad_token_id\": 0}";
  const char *ncfg = "{\"model_type\": \"nemotron_h\", \"architectures\": [\"NemotronHForCausalLM\"],"
                     " \"vocab_size\": 40, \"hidden_size\": 16, \"intermediate_size\": 24, \"num_hidden_layers\": 4,"
                     " \"layers_block_type\": [\"mamba\", \"attention\", \"mlp\", \"mamba\"],"
                     " \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_dim\": 8,"
                     " \"mamba_num_heads\": 4, \"mamba_head_dim\": 8, \"n_groups\": 2, \"ssm_state_size\": 4,"
                     " \"conv_kernel\": 3, \"use_conv_bias\": true, \"use_bias\": false, \"mlp_hidden_act\": \"relu2\","
                     " \"mamba_hidden_act\": \"silu\", \"layer_norm_epsilon\": 1e-5, \"max_position_embeddings\": 64,"
                     " \"tie_word_embeddings\": false, \"bos_token_id\": 1, \"eos_token_id\": 2, \"pad_token_id\": 0}";
  const char *fcfg = "{\"model_type\": \"falcon_h1\", \"architectures\": [\"FalconH1ForCausalLM\"],"
                     " \"vocab_size\": 40, \"hidden_size\": 16, \"intermediate_size\": 24, \"num_hidden_layers\": 2,"
                     " \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_dim\": 8,"
                     " \"mamba_n_heads\": 4, \"mamba_d_head\": 8, \"mamba_n_groups\": 2, \"mamba_d_state\": 4,"
                     " \"mamba_d_conv\": 3, \"mamba_expand\": 2, \"mamba_conv_bias\": true, \"mamba_proj_bias\": false,"
                     " \"mamba_rms_norm\": true, \"mamba_norm_before_gate\": false, \"rms_norm_eps\": 1e-5,"
                     " \"hidden_act\": \"silu\", \"embedding_multiplier\": 1.5, \"lm_head_multiplier\": 0.7,"
                     " \"ssm_in_multiplier\": 0.9, \"ssm_out_multiplier\": 1.2, \"attention_in_multiplier\": 0.8,"
                     " \"attention_out_multiplier\": 1.1, \"key_multiplier\": 0.6, \"mlp_multipliers\": [0.9, 1.1],"
                     " \"ssm_multipliers\": [1.0, 0.9, 1.1, 0.8, 1.2], \"max_position_embeddings\": 64,"
                     " \"tie_word_embeddings\": false, \"rope_parameters\": {\"rope_type\": \"default\","
                     " \"rope_theta\": 10000.0}, \"bos_token_id\": 1, \"eos_token_id\": 2, \"pad_token_id\": 0}";
  const char *lcfg = "{\"model_type\": \"lfm2\", \"architectures\": [\"Lfm2ForCausalLM\"], \"vocab_size\": 40,"
                     " \"hidden_size\": 16, \"intermediate_size\": 36, \"block_auto_adjust_ff_dim\": true,"
                     " \"block_ffn_dim_multiplier\": 1.0, \"block_multiple_of\": 8, \"num_hidden_layers\": 3,"
                     " \"layer_types\": [\"conv\", \"full_attention\", \"conv\"], \"num_attention_heads\": 2,"
                     " \"num_key_value_heads\": 1, \"conv_L_cache\": 3, \"conv_bias\": true, \"norm_eps\": 1e-5,"
                     " \"max_position_embeddings\": 64, \"tie_word_embeddings\": false,"
                     " \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 10000.0},"
                     " \"bos_token_id\": 1, \"eos_token_id\": 2, \"pad_token_id\": 0}";
  const char *mcfg = "{\"model_type\": \"lfm2_moe\", \"architectures\": [\"Lfm2MoeForCausalLM\"],"
                     " \"vocab_size\": 40, \"hidden_size\": 16, \"intermediate_size\": 24, \"moe_intermediate_size\": 8,"
                     " \"num_experts\": 4, \"num_experts_per_tok\": 2, \"num_dense_layers\": 1,"
                     " \"use_expert_bias\": true, \"norm_topk_prob\": true, \"routed_scaling_factor\": 1.5,"
                     " \"num_hidden_layers\": 3, \"layer_types\": [\"conv\", \"full_attention\", \"conv\"],"
                     " \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"conv_L_cache\": 3,"
                     " \"conv_bias\": true, \"norm_eps\": 1e-5, \"max_position_embeddings\": 64,"
                     " \"tie_word_embeddings\": false, \"bos_token_id\": 1, \"eos_token_id\": 2, \"pad_token_id\": 0}";
  const char *cfgs[] = { cfg, ncfg, fcfg, lcfg, mcfg };
  if (family == QWEN3_5 || family == QWEN3_NEXT)
    {
      g_autofree char *qc = g_strdup_printf (
        "{\"model_type\": \"%s\", \"vocab_size\": 40, \"hidden_size\": 16, \"intermediate_size\": 24,"
        " \"num_hidden_layers\": 3, \"layer_types\": [\"linear_attention\", \"full_attention\", \"linear_attention\"],"
        " \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_dim\": 8, \"linear_conv_kernel_dim\": 3,"
        " \"linear_num_key_heads\": 1, \"linear_num_value_heads\": 2, \"linear_key_head_dim\": 8,"
        " \"linear_value_head_dim\": 4, \"rms_norm_eps\": 1e-6, \"hidden_act\": \"silu\",%s"
        " \"max_position_embeddings\": 64, \"tie_word_embeddings\": false, \"rope_parameters\": {\"rope_type\":"
        " \"default\", \"rope_theta\": 10000.0, \"partial_rotary_factor\": 0.25}, \"bos_token_id\": 1,"
        " \"eos_token_id\": 2, \"pad_token_id\": 0}", family == QWEN3_NEXT ? "qwen3_next" : "qwen3_5_text",
        family == QWEN3_NEXT ? " \"num_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 8,"
                               " \"shared_expert_intermediate_size\": 8, \"norm_topk_prob\": true,"
                               " \"decoder_sparse_step\": 1, \"mlp_only_layers\": [],"
                             : "");
      g_autofree char *qp = g_build_filename (dir, "config.json", NULL);
      g_assert_true (g_file_set_contents (qp, qc, -1, &error));
      g_autoptr (GRand) qr = g_rand_new_with_seed (25);
      g_autoptr (HnSafetensorsWriter) qw = hn_safetensors_writer_new ();
      write_qwen3_5 (qw, qr, family == QWEN3_NEXT);
      g_autofree char *mp = g_build_filename (dir, "model.safetensors", NULL);
      g_assert_true (hn_safetensors_writer_write_file (qw, mp, &error));
      g_assert_no_error (error);
      return dir;
    }
  g_autofree char *cp = g_build_filename (dir, "config.json", NULL);
  g_assert_true (g_file_set_contents (cp, cfgs[family], -1, &error));
  g_autoptr (GRand) rng = g_rand_new_with_seed (25);
  g_autoptr (HnSafetensorsWriter) w = hn_safetensors_writer_new ();
  if (family == LFM2 || family == LFM2_MOE)
    {
      write_lfm2 (w, rng, family == LFM2_MOE);
      g_autofree char *lp = g_build_filename (dir, "model.safetensors", NULL);
      g_assert_true (hn_safetensors_writer_write_file (w, lp, &error));
      g_assert_no_error (error);
      return dir;
    }
  add (w, rng, nemotron ? "backbone.embeddings.weight" : "model.embed_tokens.weight", 2, (gint64[]) { V, C }, 0.5f, 0.0f);
  add (w, rng, "lm_head.weight", 2, (gint64[]) { V, C }, 0.3f, 0.0f);
  add (w, rng, nemotron ? "backbone.norm_f.weight" : "model.final_layernorm.weight", 1, (gint64[]) { C }, 0.1f, 1.0f);
  /* M = Mamba-2, A = attention, - = MLP only, P = attention and Mamba-2 */
  static const char kinds[3][5] = { "MAM", "MA-M", "PP" };
  const char *mx = nemotron ? "mixer." : "self_attn.", *mm = nemotron ? "mixer." : "mamba.";
  for (int l = 0; kinds[family][l]; l++)
    {
      char nm[128];
      char kind = kinds[family][l];
#define NM(p, s) (g_snprintf (nm, sizeof nm, "%s.layers.%d.%s%s", nemotron ? "backbone" : "model", l, p, s), nm)
      add (w, rng, NM ("", nemotron ? "norm.weight" : "input_layernorm.weight"), 1, (gint64[]) { C }, 0.1f, 1.0f);
      if (!nemotron)
        {
          add (w, rng, NM ("", "pre_ff_layernorm.weight"), 1, (gint64[]) { C }, 0.1f, 1.0f);
          add (w, rng, NM ("", "feed_forward.gate_proj.weight"), 2, (gint64[]) { F, C }, 0.3f, 0.0f);
          add (w, rng, NM ("", "feed_forward.up_proj.weight"), 2, (gint64[]) { F, C }, 0.3f, 0.0f);
          add (w, rng, NM ("", "feed_forward.down_proj.weight"), 2, (gint64[]) { C, F }, 0.3f, 0.0f);
        }
      if (kind == '-')
        {
          add (w, rng, NM (mx, "up_proj.weight"), 2, (gint64[]) { F, C }, 0.3f, 0.0f);
          add (w, rng, NM (mx, "down_proj.weight"), 2, (gint64[]) { C, F }, 0.3f, 0.0f);
        }
      if (kind == 'A' || kind == 'P')
        {
          add (w, rng, NM (mx, "q_proj.weight"), 2, (gint64[]) { NH * HD, C }, 0.4f, 0.0f);
          add (w, rng, NM (mx, "k_proj.weight"), 2, (gint64[]) { KVH * HD, C }, 0.4f, 0.0f);
          add (w, rng, NM (mx, "v_proj.weight"), 2, (gint64[]) { KVH * HD, C }, 0.4f, 0.0f);
          add (w, rng, NM (mx, "o_proj.weight"), 2, (gint64[]) { C, NH * HD }, 0.4f, 0.0f);
        }
      if (kind == 'M' || kind == 'P')
        {
          add (w, rng, NM (mm, "in_proj.weight"), 2, (gint64[]) { R, C }, 0.4f, 0.0f);
          add (w, rng, NM (mm, "conv1d.weight"), 3, (gint64[]) { CD, 1, K }, 0.5f, 0.0f);
          add (w, rng, NM (mm, "conv1d.bias"), 1, (gint64[]) { CD }, 0.1f, 0.0f);
          add (w, rng, NM (mm, "dt_bias"), 1, (gint64[]) { MH }, 0.5f, 0.0f);
          add (w, rng, NM (mm, "A_log"), 1, (gint64[]) { MH }, 0.5f, 0.5f);
          add (w, rng, NM (mm, "D"), 1, (gint64[]) { MH }, 0.5f, 1.0f);
          add (w, rng, NM (mm, "norm.weight"), 1, (gint64[]) { I }, 0.1f, 1.0f);
          add (w, rng, NM (mm, "out_proj.weight"), 2, (gint64[]) { C, I }, 0.3f, 0.0f);
        }
#undef NM
    }
  g_autofree char *mp = g_build_filename (dir, "model.safetensors", NULL);
  g_assert_true (hn_safetensors_writer_write_file (w, mp, &error));
  g_assert_no_error (error);
  return dir;
}

static void
remove_model (const char *dir)
{
  g_autofree char *cp = g_build_filename (dir, "config.json", NULL);
  g_autofree char *mp = g_build_filename (dir, "model.safetensors", NULL);
  g_unlink (cp);
  g_unlink (mp);
  g_rmdir (dir);
}

static const int32_t ids[] = { 5, 17, 3, 33, 8, 21, 12, 39, 4, 26, 11 };
#define NI ((int) G_N_ELEMENTS (ids))

static void
assert_close (const float *got, const float *want, int n, const char *what)
{
  for (int i = 0; i < n; i++)
    if (!(fabsf (got[i] - want[i]) <= 1e-4f + 1e-4f * fabsf (want[i])))
      g_error ("%s: logit %d is %g, the full forward gives %g", what, i, got[i], want[i]);
}

/* Prefill ids[0, n0) (in chunks of `chunk`), then one token at a time: every step's logits are the
 * full forward's at that position. */
static void
check_session (HnTransformer *m, HnKvCacheMode mode, int chunk, const float *full)
{
  GError *error = NULL;
  g_autoptr (HnTransformerSession) s = hn_transformer_session_new (m, mode, 1, 32, &error);
  g_assert_no_error (error);
  g_assert_true (hn_transformer_session_set_prefill_chunk (s, chunk, &error));
  const HnLmOps *ops = hn_transformer_session_lm_ops ();
  float lg[V];
  for (int pass = 0; pass < 2; pass++) /* the second after a reset: the states start over */
    {
      g_assert_true (ops->reset (s, 1, &error));
      int n0 = 5;
      g_assert_true (ops->prefill (s, 0, ids, n0, lg, &error));
      g_assert_no_error (error);
      assert_close (lg, full + (gsize) (n0 - 1) * V, V, "prefill");
      for (int t = n0; t < NI; t++)
        {
          int row = 0;
          g_assert_true (ops->decode (s, 1, &row, &ids[t], lg, &error));
          g_assert_no_error (error);
          assert_close (lg, full + (gsize) t * V, V, hn_kv_cache_mode_name (mode));
        }
    }
}

static void
test_session (gconstpointer family)
{
  g_autofree char *dir = write_model (GPOINTER_TO_INT (family));
  GError *error = NULL;
  g_autoptr (HnTransformer) m = hn_transformer_load (ctx, dir, &error);
  g_assert_no_error (error);
  const HnTransformerHParams *hp = hn_transformer_get_hparams (m);
  g_assert_nonnull (hp->layer_mixer);
  if (GPOINTER_TO_INT (family) == FALCON_H1)
    g_assert_cmpint (hp->layer_mixer[1], ==, HN_MIXER_PARALLEL);
  else if (GPOINTER_TO_INT (family) == QWEN3_5 || GPOINTER_TO_INT (family) == QWEN3_NEXT)
    {
      g_assert_cmpint (hp->layer_mixer[0], ==, HN_MIXER_DELTANET);
      g_assert_cmpint (hp->layer_mixer[1], ==, HN_MIXER_ATTENTION);
      g_assert_cmpint (hp->rot_dims, ==, HD / 4); /* rope_parameters' partial_rotary_factor */
      g_assert_cmpint (hp->attn_gate_act, ==, HN_ACT_SIGMOID);
    }
  else if (GPOINTER_TO_INT (family) == LFM2 || GPOINTER_TO_INT (family) == LFM2_MOE)
    {
      g_assert_cmpint (hp->layer_mixer[0], ==, HN_MIXER_SHORTCONV);
      g_assert_cmpint (hp->layer_mixer[1], ==, HN_MIXER_ATTENTION);
      g_assert_cmpint (hp->ffn, ==, F); /* lfm2: int(2 · 36 / 3) rounded up to block_multiple_of */
      g_assert_true (hp->qk_norm_head);
      if (GPOINTER_TO_INT (family) == LFM2_MOE)
        {
          g_assert_false (hn_transformer_layer_is_moe (hp, 0));
          g_assert_true (hn_transformer_layer_is_moe (hp, 1) && hn_transformer_layer_is_moe (hp, 2));
          g_assert_cmpfloat (hp->moe_scale, ==, 1.5f);
        }
    }
  else
    {
      g_assert_cmpint (hp->layer_mixer[0], ==, HN_MIXER_MAMBA2);
      g_assert_cmpint (hp->layer_mixer[1], ==, HN_MIXER_ATTENTION);
    }
  if (GPOINTER_TO_INT (family) == NEMOTRON_H)
    {
      g_assert_false (hp->rope);
      g_assert_cmpint (hp->layer_mixer[2], ==, HN_MIXER_NONE);
      g_assert_cmpint (hp->ssm.norm_groups, ==, G);
    }
  else if (GPOINTER_TO_INT (family) == BAMBA)
    g_assert_cmpint (hp->rot_dims, ==, HD / 2); /* BambaConfig's partial_rotary_factor 0.5 */
  g_assert_cmpint (hn_arch_cache_kind (hp->arch), ==, HN_CACHE_KV_AND_STATE);
  g_autofree float *full = g_new (float, (gsize) NI * V);
  g_assert_true (hn_transformer_logits (m, ids, NI, full, &error));
  g_assert_no_error (error);
  check_session (m, HN_KV_CACHE_CONTIGUOUS, 32, full);
  check_session (m, HN_KV_CACHE_CONTIGUOUS, 2, full); /* chunks carry the states across */
  check_session (m, HN_KV_CACHE_NONE, 32, full);
  remove_model (dir);
}

/* Two rows of different prompts; a reorder gives row 0 row 1's cache and state. */
static void
test_reorder (gconstpointer family)
{
  g_autofree char *dir = write_model (GPOINTER_TO_INT (family));
  GError *error = NULL;
  g_autoptr (HnTransformer) m = hn_transformer_load (ctx, dir, &error);
  g_assert_no_error (error);
  g_autofree float *full = g_new (float, (gsize) NI * V);
  g_assert_true (hn_transformer_logits (m, ids, NI, full, &error));
  g_autoptr (HnTransformerSession) s = hn_transformer_session_new (m, HN_KV_CACHE_CONTIGUOUS, 2, 32, &error);
  g_assert_no_error (error);
  const HnLmOps *ops = hn_transformer_session_lm_ops ();
  float lg[2 * V];
  const int32_t other[6] = { 9, 9, 30, 1, 14, 7 };
  g_assert_true (ops->reset (s, 2, &error));
  g_assert_true (ops->prefill (s, 0, other, 6, lg, &error));
  g_assert_true (ops->prefill (s, 1, ids, 6, lg, &error));
  g_assert_no_error (error);
  assert_close (lg, full + 5 * V, V, "row 1 prefill");
  const int src[2] = { 1, 1 };
  g_assert_true (ops->reorder (s, 2, src, &error));
  g_assert_no_error (error);
  const int rows[2] = { 0, 1 };
  const int32_t next[2] = { ids[6], ids[6] };
  g_assert_true (ops->decode (s, 2, rows, next, lg, &error));
  g_assert_no_error (error);
  assert_close (lg, full + 6 * V, V, "row 0 after the reorder");
  assert_close (lg + V, full + 6 * V, V, "row 1 after the reorder");
  remove_model (dir);
}

static void
test_fail_closed (gconstpointer family)
{
  g_autofree char *dir = write_model (GPOINTER_TO_INT (family));
  GError *error = NULL;
  g_autoptr (HnTransformer) m = hn_transformer_load (ctx, dir, &error);
  g_assert_no_error (error);
  g_autoptr (HnTransformerSession) s = hn_transformer_session_new (m, HN_KV_CACHE_PAGED, 1, 32, &error);
  g_assert_null (s);
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "recurrent state"));
  g_clear_error (&error);
  g_assert_false (hn_transformer_check_pageable (m, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_clear_error (&error);
  g_assert_null (hn_train_graph_new (m, 1, 4, NULL, &error)); /* the state layers have no backward here */
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "hybrid"));
  g_clear_error (&error);
  g_assert_false (hn_arch_require_task (hn_transformer_get_hparams (m)->arch, HN_TASK_TRAIN, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, hn_transformer_get_hparams (m)->arch->model_type));
  g_clear_error (&error);
  remove_model (dir);
}

/* recurrent_gemma's fixture (tests/fixtures/parity/recurrent_gemma: two recurrent blocks, then local
 * attention over a window of 4): the session's prefill in chunks, then one token at a time past the
 * window, gives the full forward's logits; a reorder carries the RG-LRU's h and conv state; the paged
 * cache, training and LoRA fail closed. */
enum { RG_V = 128 };

static void
rg_session (HnTransformer *m, HnKvCacheMode mode, int chunk, const float *full)
{
  GError *error = NULL;
  g_autoptr (HnTransformerSession) s = hn_transformer_session_new (m, mode, 1, 32, &error);
  g_assert_no_error (error);
  g_assert_true (hn_transformer_session_set_prefill_chunk (s, chunk, &error));
  const HnLmOps *ops = hn_transformer_session_lm_ops ();
  float lg[RG_V];
  for (int pass = 0; pass < 2; pass++)
    {
      g_assert_true (ops->reset (s, 1, &error));
      g_assert_true (ops->prefill (s, 0, ids, 3, lg, &error));
      g_assert_no_error (error);
      assert_close (lg, full + 2 * RG_V, RG_V, "recurrent_gemma prefill");
      for (int t = 3; t < NI; t++)
        {
          int row = 0;
          g_assert_true (ops->decode (s, 1, &row, &ids[t], lg, &error));
          g_assert_no_error (error);
          assert_close (lg, full + (gsize) t * RG_V, RG_V, hn_kv_cache_mode_name (mode));
        }
    }
}

static void
test_recurrent_gemma (void)
{
  g_autofree char *dir = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "parity",
                                           "recurrent_gemma", NULL);
  GError *error = NULL;
  g_autoptr (HnTransformer) m = hn_transformer_load (ctx, dir, &error);
  g_assert_no_error (error);
  const HnTransformerHParams *hp = hn_transformer_get_hparams (m);
  g_assert_cmpint (hp->layer_mixer[0], ==, HN_MIXER_RGLRU);
  g_assert_cmpint (hp->layer_mixer[2], ==, HN_MIXER_ATTENTION);
  g_assert_cmpint (hp->sliding_window, ==, 4);
  g_assert_true (hp->layer_sliding[2]);
  g_assert_cmpint (hp->rot_dims, ==, 4);
  g_assert_cmpfloat (hp->embed_scale, ==, 5.65625f); /* sqrt(32) as a bfloat16 */
  g_assert_cmpint (hn_arch_cache_kind (hp->arch), ==, HN_CACHE_KV_AND_STATE);
  g_autofree float *full = g_new (float, (gsize) NI * RG_V);
  g_assert_true (hn_transformer_logits (m, ids, NI, full, &error));
  g_assert_no_error (error);
  rg_session (m, HN_KV_CACHE_CONTIGUOUS, 32, full);
  rg_session (m, HN_KV_CACHE_CONTIGUOUS, 2, full);
  rg_session (m, HN_KV_CACHE_NONE, 32, full);

  /* a reorder gives row 0 row 1's states */
  g_autoptr (HnTransformerSession) s = hn_transformer_session_new (m, HN_KV_CACHE_CONTIGUOUS, 2, 32, &error);
  g_assert_no_error (error);
  const HnLmOps *ops = hn_transformer_session_lm_ops ();
  float lg[2 * RG_V];
  const int32_t other[6] = { 9, 9, 30, 1, 14, 7 };
  g_assert_true (ops->reset (s, 2, &error));
  g_assert_true (ops->prefill (s, 0, other, 6, lg, &error));
  g_assert_true (ops->prefill (s, 1, ids, 6, lg, &error));
  g_assert_no_error (error);
  assert_close (lg, full + 5 * RG_V, RG_V, "row 1 prefill");
  const int src[2] = { 1, 1 }, rows[2] = { 0, 1 };
  const int32_t next[2] = { ids[6], ids[6] };
  g_assert_true (ops->reorder (s, 2, src, &error));
  g_assert_true (ops->decode (s, 2, rows, next, lg, &error));
  g_assert_no_error (error);
  assert_close (lg, full + 6 * RG_V, RG_V, "row 0 after the reorder");
  assert_close (lg + RG_V, full + 6 * RG_V, RG_V, "row 1 after the reorder");

  /* fail closed: the paged cache, training, LoRA */
  g_autoptr (HnTransformerSession) sp = hn_transformer_session_new (m, HN_KV_CACHE_PAGED, 1, 32, &error);
  g_assert_null (sp);
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "recurrent state"));
  g_clear_error (&error);
  g_assert_false (hn_transformer_check_pageable (m, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_clear_error (&error);
  g_assert_null (hn_train_graph_new (m, 1, 4, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_clear_error (&error);
  HnTask tasks[2] = { HN_TASK_TRAIN, HN_TASK_LORA };
  for (int k = 0; k < 2; k++)
    {
      g_assert_false (hn_arch_require_task (hp->arch, tasks[k], &error));
      g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
      g_assert_nonnull (strstr (error->message, "recurrent_gemma"));
      g_clear_error (&error);
    }
}

/* LFM2's original config keys, as Lfm2Config reads them: full_attn_idxs, block_ff_dim sized by
 * block_auto_adjust_ff_dim (int(2 · 12288 / 3) = 8192, a multiple of 256), theta, tie_embedding; and
 * lfm2_moe's defaults. */
static void
test_lfm2_config (void)
{
  static const char lfm2[] =
    "{\"model_type\": \"lfm2\", \"vocab_size\": 64, \"hidden_size\": 32, \"num_hidden_layers\": 4,"
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"full_attn_idxs\": [1, 3], \"block_ff_dim\": 12288,"
    " \"intermediate_size\": 100, \"block_auto_adjust_ff_dim\": true, \"block_ffn_dim_multiplier\": 1.0,"
    " \"block_multiple_of\": 256, \"theta\": 500000.0, \"tie_embedding\": false, \"tie_word_embeddings\": true,"
    " \"conv_L_cache\": 4}";
  static const char moe[] =
    "{\"model_type\": \"lfm2_moe\", \"vocab_size\": 64, \"hidden_size\": 32, \"num_hidden_layers\": 4,"
    " \"num_attention_heads\": 4, \"intermediate_size\": 100, \"moe_intermediate_size\": 16, \"num_experts\": 8,"
    " \"num_experts_per_tok\": 2, \"use_expert_bias\": false,"
    " \"layer_types\": [\"conv\", \"conv\", \"full_attention\", \"conv\"]}";
  GError *error = NULL;
  g_autoptr (HnModelConfig) c = hn_model_config_load_from_data (lfm2, -1, "lfm2.json", &error);
  g_assert_no_error (error);
  HnTransformerHParams hp;
  g_assert_true (hn_transformer_hparams_resolve (&hp, c, &error));
  g_assert_no_error (error);
  static const guint8 mixers[4] = { HN_MIXER_SHORTCONV, HN_MIXER_ATTENTION, HN_MIXER_SHORTCONV, HN_MIXER_ATTENTION };
  g_assert_cmpmem (hp.layer_mixer, 4, mixers, 4);
  g_assert_cmpint (hp.ffn, ==, 8192);
  g_assert_cmpfloat (hp.rope_theta, ==, 500000.0);
  g_assert_false (hp.tie_embeddings);
  g_assert_cmpint (hp.ssm_conv_kernel, ==, 4);
  g_assert_cmpfloat (hp.norm_eps, ==, 1e-5f);
  hn_transformer_hparams_clear (&hp);
  g_autoptr (HnModelConfig) m = hn_model_config_load_from_data (moe, -1, "lfm2_moe.json", &error);
  g_assert_no_error (error);
  g_assert_true (hn_transformer_hparams_resolve (&hp, m, &error));
  g_assert_no_error (error);
  g_assert_cmpint (hp.ffn, ==, 100); /* Lfm2MoeMLP: intermediate_size as it is */
  g_assert_cmpint (hp.moe_first_dense, ==, 2);
  g_assert_true (hp.moe_norm_topk && hp.moe_no_route_bias && hp.tie_embeddings);
  g_assert_cmpfloat (hp.rope_theta, ==, 1000000.0);
  g_assert_cmpint (hp.layer_mixer[2], ==, HN_MIXER_ATTENTION);
  hn_transformer_hparams_clear (&hp);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  GError *error = NULL;
  ctx = hn_vk_context_new (-1, &error);
  if (!ctx)
    {
      g_printerr ("no Vulkan device: %s\n", error->message);
      g_clear_error (&error);
      return 1;
    }
  g_test_add_data_func ("/hybrid/session/bamba", GINT_TO_POINTER (BAMBA), test_session);
  g_test_add_data_func ("/hybrid/session/nemotron_h", GINT_TO_POINTER (NEMOTRON_H), test_session);
  g_test_add_data_func ("/hybrid/session/falcon_h1", GINT_TO_POINTER (FALCON_H1), test_session);
  g_test_add_data_func ("/hybrid/session/lfm2", GINT_TO_POINTER (LFM2), test_session);
  g_test_add_data_func ("/hybrid/session/lfm2_moe", GINT_TO_POINTER (LFM2_MOE), test_session);
  g_test_add_data_func ("/hybrid/session/qwen3_5_text", GINT_TO_POINTER (QWEN3_5), test_session);
  g_test_add_data_func ("/hybrid/session/qwen3_next", GINT_TO_POINTER (QWEN3_NEXT), test_session);
  g_test_add_data_func ("/hybrid/reorder/bamba", GINT_TO_POINTER (BAMBA), test_reorder);
  g_test_add_data_func ("/hybrid/reorder/qwen3_next", GINT_TO_POINTER (QWEN3_NEXT), test_reorder);
  g_test_add_data_func ("/hybrid/reorder/lfm2", GINT_TO_POINTER (LFM2), test_reorder);
  g_test_add_data_func ("/hybrid/reorder/falcon_h1", GINT_TO_POINTER (FALCON_H1), test_reorder);
  g_test_add_data_func ("/hybrid/fail-closed/bamba", GINT_TO_POINTER (BAMBA), test_fail_closed);
  g_test_add_data_func ("/hybrid/fail-closed/lfm2", GINT_TO_POINTER (LFM2), test_fail_closed);
  g_test_add_data_func ("/hybrid/fail-closed/qwen3_5_text", GINT_TO_POINTER (QWEN3_5), test_fail_closed);
  g_test_add_func ("/hybrid/lfm2-config", test_lfm2_config);
  g_test_add_func ("/hybrid/recurrent_gemma", test_recurrent_gemma);
  int rc = g_test_run ();
  hn_vk_context_unref (ctx);
  return rc;
}
