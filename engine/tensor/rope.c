/* RoPE frequencies on the host, mirroring transformers'
 * modeling_rope_utils.ROPE_INIT_FUNCTIONS (default, linear, dynamic, llama3,
 * yarn, longrope). Math in double, rounded to f32 at the end; transformers
 * computes in f32 tensors, which differs by a few ulps at most. */
#include "tensor/hn-ops.h"
#include "base/hn-error.h"

#include <math.h>

static double
yarn_get_mscale (double scale, double mscale)
{
  if (scale <= 1.0)
    return 1.0;
  return 0.1 * mscale * log (scale) + 1.0;
}

static double
yarn_correction_dim (double num_rotations, int dim, double base, double max_pos)
{
  return (dim * log (max_pos / (num_rotations * 2 * G_PI))) / (2 * log (base));
}

gboolean
hn_rope_compute_inv_freq (double base, int rot_dims, gint64 max_position_embeddings, const HnRopeScaling *scaling,
                          gint64 seq_len, float *inv_freq, float *attention_scale, GError **error)
{
  if (rot_dims <= 0 || rot_dims % 2 != 0 || base <= 1.0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "rope: rotary dims %d must be positive and even, and theta %g above 1", rot_dims, base);
      return FALSE;
    }
  int dim = rot_dims, half = rot_dims / 2;
  HnRopeScalingType type = scaling ? scaling->type : HN_ROPE_SCALING_NONE;
  double factor = scaling ? scaling->factor : 1.0;
  double attn = 1.0;
  if (type != HN_ROPE_SCALING_NONE && type != HN_ROPE_SCALING_LONGROPE && !(factor > 0))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "rope scaling: factor %g must be positive", factor);
      return FALSE;
    }
  gint64 orig = scaling && scaling->original_max_position_embeddings > 0 ? scaling->original_max_position_embeddings
                                                                           : max_position_embeddings;

  switch (type)
    {
    case HN_ROPE_SCALING_NONE:
    case HN_ROPE_SCALING_LINEAR:
      for (int i = 0; i < half; i++)
        {
          double f = 1.0 / pow (base, (double) (2 * i) / dim);
          inv_freq[i] = (float) (type == HN_ROPE_SCALING_LINEAR ? f / factor : f);
        }
      break;

    case HN_ROPE_SCALING_DYNAMIC:
      {
        /* base grows once the sequence is longer than the trained length */
        double b = base;
        double sl = (double) MAX (seq_len, max_position_embeddings);
        if (max_position_embeddings <= 0)
          {
            g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "rope dynamic: max_position_embeddings is required");
            return FALSE;
          }
        b = base * pow ((factor * sl / (double) max_position_embeddings) - (factor - 1.0), (double) dim / (dim - 2));
        for (int i = 0; i < half; i++)
          inv_freq[i] = (float) (1.0 / pow (b, (double) (2 * i) / dim));
        break;
      }

    case HN_ROPE_SCALING_LLAMA3:
      {
        double lf = scaling->low_freq_factor, hf = scaling->high_freq_factor;
        if (!(lf > 0) || !(hf > lf) || orig <= 0)
          {
            g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                         "rope llama3: low_freq_factor %g, high_freq_factor %g and original_max_position_embeddings %"
                         G_GINT64_FORMAT " are not valid", lf, hf, orig);
            return FALSE;
          }
        double low_wl = (double) orig / lf, high_wl = (double) orig / hf;
        for (int i = 0; i < half; i++)
          {
            double f = 1.0 / pow (base, (double) (2 * i) / dim);
            double wl = 2 * G_PI / f;
            double r;
            if (wl < high_wl)
              r = f;
            else if (wl > low_wl)
              r = f / factor;
            else
              {
                double smooth = ((double) orig / wl - lf) / (hf - lf);
                r = (1 - smooth) * f / factor + smooth * f;
              }
            inv_freq[i] = (float) r;
          }
        break;
      }

    case HN_ROPE_SCALING_YARN:
      {
        if (orig <= 0)
          {
            g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "rope yarn: original_max_position_embeddings is required");
            return FALSE;
          }
        if (scaling->attention_factor > 0)
          attn = scaling->attention_factor;
        else if (scaling->mscale > 0 && scaling->mscale_all_dim > 0)
          attn = yarn_get_mscale (factor, scaling->mscale) / yarn_get_mscale (factor, scaling->mscale_all_dim);
        else
          attn = yarn_get_mscale (factor, 1.0);
        double beta_fast = scaling->beta_fast > 0 ? scaling->beta_fast : 32.0;
        double beta_slow = scaling->beta_slow > 0 ? scaling->beta_slow : 1.0;
        double low = yarn_correction_dim (beta_fast, dim, base, (double) orig);
        double high = yarn_correction_dim (beta_slow, dim, base, (double) orig);
        if (!scaling->yarn_no_truncate)
          {
            low = floor (low);
            high = ceil (high);
          }
        low = MAX (low, 0);
        high = MIN (high, dim - 1);
        if (low == high)
          high += 0.001;
        for (int i = 0; i < half; i++)
          {
            double pos_freq = pow (base, (double) (2 * i) / dim);
            double extrap = 1.0 / pos_freq, interp = 1.0 / (factor * pos_freq);
            double ramp = CLAMP (((double) i - low) / (high - low), 0.0, 1.0);
            double extrap_factor = 1.0 - ramp;
            inv_freq[i] = (float) (interp * (1 - extrap_factor) + extrap * extrap_factor);
          }
        break;
      }

    case HN_ROPE_SCALING_LONGROPE:
      {
        if (!scaling->short_factor || !scaling->long_factor || scaling->n_factors != (guint) half || orig <= 0)
          {
            g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                         "rope longrope: short_factor and long_factor need %d entries each and "
                         "original_max_position_embeddings must be set", half);
            return FALSE;
          }
        /* transformers: factor = max_position_embeddings / original when the
         * config has original_max_position_embeddings. */
        double f = factor > 0 ? factor : (double) max_position_embeddings / (double) orig;
        if (scaling->attention_factor > 0)
          attn = scaling->attention_factor;
        else
          attn = f <= 1.0 ? 1.0 : sqrt (1 + log (f) / log ((double) orig));
        const double *ext = seq_len > orig ? scaling->long_factor : scaling->short_factor;
        for (int i = 0; i < half; i++)
          inv_freq[i] = (float) (1.0 / (ext[i] * pow (base, (double) (2 * i) / dim)));
        break;
      }

    default:
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "rope scaling type %d is not supported", (int) type);
      return FALSE;
    }
  if (attention_scale)
    *attention_scale = (float) attn;
  return TRUE;
}
