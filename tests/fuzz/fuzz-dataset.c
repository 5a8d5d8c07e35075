/* Dataset rows: JSONL (six row shapes, chat messages through the template),
 * tokenized with a real SentencePiece tokenizer, with truncation, packing and
 * skip of malformed rows; then a pass of the batch iterator. The first byte
 * picks options so the fuzzer reaches every mode. */
#include "fuzz-common.h"
#include "data/dataset.h"
#include "tokenizer/tokenizer.h"

static HnTokenizer *tok;

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  if (!tok)
    {
      g_autofree char *tp = fuzz_shared_path ("models/stories260K");
      g_autoptr (GError) error = NULL;
      tok = hn_tokenizer_load (tp, &error);
      if (!tok)
        g_error ("fuzz-dataset needs %s: %s", tp, error->message);
    }
  guint8 mode = size > 0 ? data[0] : 0;
  if (size > 0)
    data++, size--;
  g_autofree char *path = fuzz_write ((mode & 8) ? "rows.json" : "rows.jsonl", data, size);
  HnDatasetOptions opts;
  hn_dataset_options_init (&opts);
  opts.seq_len = 1 + (mode & 3) * 7;
  opts.pack = (mode & 4) != 0;
  opts.on_error = (mode & 16) ? HN_DATASET_ON_ERROR_SKIP : HN_DATASET_ON_ERROR_FAIL;
  opts.mask_prompt = (mode & 32) == 0;
  opts.add_eos = (mode & 64) != 0;
  if (mode & 128)
    opts.chat_template = "{% for m in messages %}<{{ m.role }}>{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}";
  g_autoptr (GError) error = NULL;
  g_autoptr (HnDataset) ds = hn_dataset_load (path, tok, &opts, &error);
  if (!ds)
    return 0;
  for (gsize i = 0; i < hn_dataset_get_n_examples (ds); i++)
    {
      HnExample ex;
      hn_dataset_get_example (ds, i, &ex);
      g_assert (ex.n_tokens <= opts.seq_len + 1);
      for (guint j = 0; j < ex.n_tokens; j++)
        g_assert (ex.ids[j] >= 0 && ex.ids[j] < hn_tokenizer_get_vocab_size (tok));
    }
  if (hn_dataset_get_n_examples (ds) > 0)
    {
      g_autoptr (GError) e2 = NULL;
      g_autoptr (HnDatasetIter) it = hn_dataset_iter_new (ds, 2, TRUE, 7, 0, &e2);
      for (int k = 0; it && k < 4 && hn_dataset_iter_next (it); k++)
        ;
    }
  return 0;
}
