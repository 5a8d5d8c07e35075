/* Continuous batching (see generate.h): a first-come-first-served scheduler
 * over a model whose rows share one page pool. Each request runs
 * transformers' _sample step for step exactly as hn_generate_run would;
 * only the model calls are shared: a prefill per admitted request and one
 * decode call per round for every active request. */
#include "generate/generate-private.h"
#include "base/hn-error.h"

#include <string.h>

typedef struct {
  GArray *ids;      /* prompt + generated */
  int n_prompt, max_length;
  int pages;        /* reserved for its whole length */
  int row;          /* -1 while waiting or after it finished */
  int32_t last;     /* the token to feed next round */
  HnRng rng;
  gint64 t0;
  HnGenerateResult *res;
} Request;

typedef struct {
  const HnGenerateModel *m;
  const HnGenerateOptions *opt;
  HnBatchDoneFunc done;
  gpointer done_data;
  int *free_rows, n_free_rows;
  int reserved;     /* pages held by the active requests */
  HnBatchStats *st;
} Sched;

static void
finish (Sched *sc, Request *r, int index, const char *reason)
{
  r->res->stop_reason = g_strdup (reason);
  GArray *gen = g_array_new (FALSE, FALSE, sizeof (int32_t));
  g_array_append_vals (gen, (const int32_t *) r->ids->data + r->n_prompt, r->ids->len - (guint) r->n_prompt);
  g_ptr_array_add (r->res->sequences, gen);
  double zero = 0.0;
  g_array_append_val (r->res->scores, zero);
  r->res->n_sequences = 1;
  r->res->seconds = (g_get_monotonic_time () - r->t0) / 1e6;
  sc->free_rows[sc->n_free_rows++] = r->row;
  sc->reserved -= r->pages;
  r->row = -1;
  if (sc->done)
    sc->done (sc->done_data, index, r->res);
}

/* One sampling step of request r on its logits; finishes it (returning its row) when it stops. */
static gboolean
step (Sched *sc, Request *r, int index, float *logits, GError **error)
{
  int32_t next;
  const char *reason = hn_generate_sample_step (sc->m, sc->opt, &r->rng, r->ids, r->n_prompt, r->max_length, logits,
                                                &next, error);
  if (!reason)
    return FALSE;
  r->res->n_generated++;
  sc->st->n_generated++;
  r->last = next;
  if (*reason)
    {
      if (!sc->m->ops->release (sc->m->lm, r->row, error))
        return FALSE;
      finish (sc, r, index, reason);
    }
  return TRUE;
}

static gboolean
check_options (const HnGenerateModel *m, const HnGenerateOptions *opt, const HnBatchOptions *bo, GError **error)
{
  if (!m->ops->release)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "continuous batching needs a model with a shared paged cache");
      return FALSE;
    }
  if (opt->num_beams > 1)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "continuous batching serves greedy and sampling requests; beam search (num_beams %d) runs without it",
                   opt->num_beams);
      return FALSE;
    }
  if (opt->num_return_sequences > 1)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "continuous batching returns one sequence per request (num_return_sequences is %d)",
                   opt->num_return_sequences);
      return FALSE;
    }
  if (bo->max_requests < 1 || bo->n_pages < 1 || bo->page_size < 1)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "continuous batching needs at least one request slot and one page (got %d requests, %d pages)",
                   bo->max_requests, bo->n_pages);
      return FALSE;
    }
  return TRUE;
}

static void
requests_free (Request *reqs, guint n)
{
  for (guint i = 0; reqs && i < n; i++)
    {
      if (reqs[i].ids)
        g_array_unref (reqs[i].ids);
      hn_generate_result_free (reqs[i].res);
    }
  g_free (reqs);
}

GPtrArray *
hn_generate_batch_run (const HnGenerateModel *m, const HnGenerateOptions *opt, const HnBatchOptions *bo,
                       GPtrArray *prompts, HnBatchDoneFunc done, gpointer done_data, HnBatchStats *stats,
                       GCancellable *cancellable, GError **error)
{
  HnBatchStats local = { 0 };
  HnBatchStats *st = stats ? stats : &local;
  memset (st, 0, sizeof *st);
  if (!check_options (m, opt, bo, error))
    return NULL;
  guint n = prompts->len;
  int V = m->vocab_size, R = MIN (bo->max_requests, (int) MAX (n, 1));
  Request *reqs = g_new0 (Request, MAX (n, 1));
  for (guint i = 0; i < n; i++)
    {
      GArray *p = g_ptr_array_index (prompts, i);
      Request *r = &reqs[i];
      GError *e = NULL;
      r->max_length = hn_generate_check_prompt (m, opt, (const int32_t *) p->data, (int) p->len, &e);
      /* the last token is never fed back: the cache holds at most max_length - 1 tokens */
      r->pages = (r->max_length - 1 + bo->page_size - 1) / bo->page_size;
      if (!e && (r->pages > bo->n_pages || (bo->max_pages_per_request > 0 && r->pages > bo->max_pages_per_request)))
        g_set_error (&e, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                     "it needs %d pages of %d tokens for %d tokens, more than the %d the cache allows per request",
                     r->pages, bo->page_size, r->max_length - 1,
                     bo->max_pages_per_request > 0 ? MIN (bo->n_pages, bo->max_pages_per_request) : bo->n_pages);
      if (e)
        {
          g_propagate_prefixed_error (error, e, "request %u: ", i);
          requests_free (reqs, n);
          return NULL;
        }
      r->n_prompt = (int) p->len;
      r->ids = g_array_sized_new (FALSE, FALSE, sizeof (int32_t), (guint) r->max_length);
      g_array_append_vals (r->ids, p->data, p->len);
      r->row = -1;
      hn_rng_seed (&r->rng, opt->seed);
      r->res = hn_generate_result_new (r->n_prompt);
    }
  g_autofree int *free_rows = g_new (int, R);
  g_autofree int *rows = g_new (int, R);
  g_autofree int *active = g_new (int, R);
  g_autofree int32_t *toks = g_new (int32_t, R);
  g_autofree float *logits = g_new (float, (gsize) R * V);
  Sched sc = { m, opt, done, done_data, free_rows, R, 0, st };
  for (int i = 0; i < R; i++)
    free_rows[i] = R - 1 - i;
  gint64 t0 = g_get_monotonic_time ();
  gboolean ok = m->ops->reset (m->lm, R, error);
  guint next = 0;
  gboolean waiting = FALSE; /* the head of the queue waits for pages */
  while (ok)
    {
      /* admit waiting requests, in order, while a row and their pages are free */
      while (ok && next < n && sc.n_free_rows > 0)
        {
          Request *r = &reqs[next];
          if (sc.reserved + r->pages > bo->n_pages)
            {
              if (!waiting)
                st->page_waits++;
              waiting = TRUE;
              break;
            }
          waiting = FALSE;
          r->row = free_rows[--sc.n_free_rows];
          sc.reserved += r->pages;
          r->t0 = g_get_monotonic_time ();
          ok = hn_generate_check_cancel (cancellable, error) &&
               m->ops->prefill (m->lm, r->row, (const int32_t *) r->ids->data, r->n_prompt, logits, error);
          r->res->prefill_seconds = (g_get_monotonic_time () - r->t0) / 1e6;
          ok = ok && step (&sc, r, (int) next, logits, error);
          next++;
        }
      int n_active = 0;
      for (guint i = 0; ok && i < next; i++)
        if (reqs[i].row >= 0)
          {
            active[n_active] = (int) i;
            rows[n_active] = reqs[i].row;
            toks[n_active] = reqs[i].last;
            n_active++;
          }
      if (!ok || n_active == 0)
        break; /* every request admitted has finished, and none waits (a waiting one had room) */
      st->max_active = MAX (st->max_active, n_active);
      ok = hn_generate_check_cancel (cancellable, error) &&
           m->ops->decode (m->lm, n_active, rows, toks, logits, error);
      st->rounds++;
      for (int j = 0; ok && j < n_active; j++)
        ok = step (&sc, &reqs[active[j]], active[j], logits + (gsize) j * V, error);
    }
  st->seconds = (g_get_monotonic_time () - t0) / 1e6;
  if (!ok)
    {
      requests_free (reqs, n);
      return NULL;
    }
  g_assert (next == n);
  GPtrArray *out = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_generate_result_free);
  for (guint i = 0; i < n; i++)
    g_ptr_array_add (out, g_steal_pointer (&reqs[i].res));
  requests_free (reqs, n);
  return out;
}
