#include "hn-data-preview.h"

#include <glib/gi18n.h>

#include "data/dataset.h"
#include "hub/hub.h"
#include "base/hn-error.h"
#include "tokenizer/tokenizer.h"

#define N_ROWS 3

struct _HnDataPreview
{
  GtkBox parent_instance;
  GtkWidget *summary, *rows;
  HnJobSpec *spec;
  GPtrArray *markup; /* char* per row shown */
  guint timeout_id;
};

G_DEFINE_FINAL_TYPE (HnDataPreview, hn_data_preview, GTK_TYPE_BOX)

static void
clear_rows (HnDataPreview *self)
{
  GtkWidget *c;
  while ((c = gtk_widget_get_first_child (self->rows)))
    gtk_box_remove (GTK_BOX (self->rows), c);
  g_ptr_array_set_size (self->markup, 0);
}

static char *
row_markup (const HnDatasetPreviewRow *r)
{
  GString *s = g_string_new (NULL);
  for (guint k = 0; k < r->segments->len; k++)
    {
      const HnDatasetSegment *seg = &g_array_index (r->segments, HnDatasetSegment, k);
      g_autofree char *esc = g_markup_escape_text (seg->text, -1);
      if (seg->trained)
        g_string_append_printf (s, "<b>%s</b>", esc);
      else /* the loss-masked prompt: no loss is computed on it */
        g_string_append_printf (s, "<span foreground=\"#77767b\" background=\"#e8e8e7\">%s</span>", esc);
    }
  return g_string_free (s, FALSE);
}

void
hn_data_preview_refresh (HnDataPreview *self)
{
  g_clear_handle_id (&self->timeout_id, g_source_remove);
  clear_rows (self);
  const char *train = self->spec ? hn_job_spec_get_string (self->spec, "train") : NULL;
  const char *ds = self->spec && hn_job_spec_lookup (self->spec, "hf-dataset")
                     ? hn_job_spec_get_string (self->spec, "hf-dataset") : NULL;
  g_autofree char *resolved = NULL;
  if (!train && ds)
    {
      /* a Hub dataset: its first file of the chosen split, from the cache only */
      g_autoptr (HnHub) hub = hn_hub_new ();
      hn_hub_set_offline (hub, TRUE);
      g_autoptr (GError) derr = NULL;
      g_auto (GStrv) paths = hn_hub_resolve_dataset (
        hub, ds, hn_job_spec_get_string (self->spec, "hf-dataset-config"),
        hn_job_spec_get_string (self->spec, "hf-dataset-split"), hn_job_spec_get_string (self->spec, "hf-dataset-file"),
        hn_job_spec_get_string (self->spec, "hf-dataset-revision"), hn_job_spec_get_string (self->spec, "hf-cache-dir"),
        NULL, &derr);
      if (!paths || !paths[0])
        {
          g_autofree char *msg = !derr || g_error_matches (derr, HN_ERROR, HN_ERROR_NOT_FOUND)
                                   ? g_strdup_printf (_("Download %s to preview it"), ds)
                                   : g_strdup_printf (_("No preview of %s: %s"), ds, derr->message);
          gtk_label_set_text (GTK_LABEL (self->summary), msg);
          return;
        }
      train = resolved = g_strdup (paths[0]);
    }
  if (!train)
    {
      gtk_label_set_text (GTK_LABEL (self->summary), _("Choose training data to see how it is trained on"));
      return;
    }
  const char *tok_dir = hn_job_spec_get_string (self->spec, "tokenizer-path");
  if (!tok_dir)
    tok_dir = hn_job_spec_get_string (self->spec, "model-path");
  g_autoptr (GError) error = NULL;
  g_autoptr (HnTokenizer) tok = tok_dir ? hn_tokenizer_load (tok_dir, &error) : NULL;
  if (!tok)
    {
      g_autofree char *msg = error ? g_strdup_printf (_("No preview: %s"), error->message)
                                   : g_strdup (_("No preview: choose a model or tokenizer"));
      gtk_label_set_text (GTK_LABEL (self->summary), msg);
      return;
    }
  HnDatasetOptions opts;
  hn_dataset_options_init (&opts);
  opts.seq_len = (guint) hn_job_spec_get_int (self->spec, "seq-len");
  HnDatasetStats st = { 0 };
  g_autoptr (GPtrArray) rows = hn_dataset_preview (train, tok, &opts, N_ROWS, &st, &error);
  if (!rows)
    {
      /* a dataset that fails to load says why, never vanishes */
      g_autofree char *msg = g_strdup_printf (_("The data cannot be read: %s"), error->message);
      gtk_label_set_text (GTK_LABEL (self->summary), msg);
      return;
    }
  guint64 tokens = 0, trained = 0;
  for (guint i = 0; i < rows->len; i++)
    {
      HnDatasetPreviewRow *r = rows->pdata[i];
      tokens += r->n_tokens;
      trained += r->n_trained;
      GString *head = g_string_new (NULL);
      if (r->line)
        g_string_append_printf (head, _("Line %" G_GUINT64_FORMAT), r->line);
      else
        g_string_append (head, _("Text"));
      g_string_append_printf (head, _(" · %u tokens, %u trained"), r->n_tokens, r->n_trained);
      if (r->truncated)
        g_string_append_printf (head, _(" · truncated from %u"), r->n_tokens_full);
      if (r->dropped || r->malformed)
        g_string_append_printf (head, " · %s", r->dropped ? _("dropped") : _("malformed"));
      if (r->reason)
        g_string_append_printf (head, ": %s", r->reason);
      GtkWidget *h = gtk_label_new (head->str);
      g_string_free (head, TRUE);
      gtk_label_set_xalign (GTK_LABEL (h), 0);
      gtk_label_set_wrap (GTK_LABEL (h), TRUE);
      gtk_widget_add_css_class (h, "caption-heading");
      if (r->truncated || r->dropped || r->malformed)
        gtk_widget_add_css_class (h, "warning");
      char *markup = row_markup (r);
      GtkWidget *body = gtk_label_new (NULL);
      gtk_label_set_markup (GTK_LABEL (body), markup);
      gtk_label_set_xalign (GTK_LABEL (body), 0);
      gtk_label_set_wrap (GTK_LABEL (body), TRUE);
      gtk_label_set_wrap_mode (GTK_LABEL (body), PANGO_WRAP_WORD_CHAR);
      gtk_label_set_selectable (GTK_LABEL (body), TRUE);
      gtk_label_set_lines (GTK_LABEL (body), 6);
      gtk_label_set_ellipsize (GTK_LABEL (body), PANGO_ELLIPSIZE_END);
      gtk_widget_add_css_class (body, "monospace");
      gtk_box_append (GTK_BOX (self->rows), h);
      gtk_box_append (GTK_BOX (self->rows), body);
      g_ptr_array_add (self->markup, markup);
    }
  g_autofree char *sum = g_strdup_printf (_("First %u rows · shape %s · %" G_GUINT64_FORMAT " tokens, %" G_GUINT64_FORMAT
                                            " trained (bold); the grey part is the loss-masked prompt"),
                                          rows->len, hn_dataset_shape_to_string (st.shape), tokens, trained);
  gtk_label_set_text (GTK_LABEL (self->summary), sum);
}

static gboolean
on_timeout (gpointer data)
{
  HnDataPreview *self = data;
  self->timeout_id = 0;
  hn_data_preview_refresh (self);
  return G_SOURCE_REMOVE;
}

static void
on_spec_changed (HnJobSpec *spec, const char *name, HnDataPreview *self)
{
  if (!g_str_equal (name, "train") && !g_str_equal (name, "tokenizer-path") && !g_str_equal (name, "model-path") &&
      !g_str_equal (name, "seq-len") && !g_str_has_prefix (name, "hf-dataset"))
    return;
  g_clear_handle_id (&self->timeout_id, g_source_remove);
  self->timeout_id = g_timeout_add (300, on_timeout, self);
}

void
hn_data_preview_set_spec (HnDataPreview *self, HnJobSpec *spec)
{
  if (self->spec)
    g_signal_handlers_disconnect_by_data (self->spec, self);
  g_set_object (&self->spec, spec);
  /* only Transformer kinds read the data through engine/data/dataset */
  gboolean shown = spec && hn_job_spec_lookup (spec, "train") && g_str_has_prefix (hn_job_spec_get_kind (spec), "transformer-");
  gtk_widget_set_visible (GTK_WIDGET (self), shown);
  if (spec)
    g_signal_connect (spec, "changed", G_CALLBACK (on_spec_changed), self);
  if (shown)
    hn_data_preview_refresh (self);
}

const char *
hn_data_preview_get_summary (HnDataPreview *self)
{
  return gtk_label_get_text (GTK_LABEL (self->summary));
}

guint
hn_data_preview_get_n_rows (HnDataPreview *self)
{
  return self->markup->len;
}

const char *
hn_data_preview_get_row_markup (HnDataPreview *self, guint i)
{
  g_return_val_if_fail (i < self->markup->len, NULL);
  return self->markup->pdata[i];
}

static void
hn_data_preview_dispose (GObject *object)
{
  HnDataPreview *self = HN_DATA_PREVIEW (object);
  g_clear_handle_id (&self->timeout_id, g_source_remove);
  if (self->spec)
    g_signal_handlers_disconnect_by_data (self->spec, self);
  g_clear_object (&self->spec);
  G_OBJECT_CLASS (hn_data_preview_parent_class)->dispose (object);
}

static void
hn_data_preview_finalize (GObject *object)
{
  g_ptr_array_unref (HN_DATA_PREVIEW (object)->markup);
  G_OBJECT_CLASS (hn_data_preview_parent_class)->finalize (object);
}

static void
hn_data_preview_class_init (HnDataPreviewClass *klass)
{
  G_OBJECT_CLASS (klass)->dispose = hn_data_preview_dispose;
  G_OBJECT_CLASS (klass)->finalize = hn_data_preview_finalize;
}

static void
hn_data_preview_init (HnDataPreview *self)
{
  gtk_orientable_set_orientation (GTK_ORIENTABLE (self), GTK_ORIENTATION_VERTICAL);
  gtk_box_set_spacing (GTK_BOX (self), 6);
  self->markup = g_ptr_array_new_with_free_func (g_free);
  self->summary = gtk_label_new (NULL);
  gtk_label_set_xalign (GTK_LABEL (self->summary), 0);
  gtk_label_set_wrap (GTK_LABEL (self->summary), TRUE);
  gtk_widget_add_css_class (self->summary, "dim-label");
  self->rows = gtk_box_new (GTK_ORIENTATION_VERTICAL, 4);
  GtkWidget *scroller = gtk_scrolled_window_new ();
  gtk_scrolled_window_set_policy (GTK_SCROLLED_WINDOW (scroller), GTK_POLICY_NEVER, GTK_POLICY_AUTOMATIC);
  gtk_scrolled_window_set_min_content_height (GTK_SCROLLED_WINDOW (scroller), 160);
  gtk_scrolled_window_set_max_content_height (GTK_SCROLLED_WINDOW (scroller), 260);
  gtk_scrolled_window_set_propagate_natural_height (GTK_SCROLLED_WINDOW (scroller), TRUE);
  gtk_scrolled_window_set_child (GTK_SCROLLED_WINDOW (scroller), self->rows);
  gtk_box_append (GTK_BOX (self), self->summary);
  gtk_box_append (GTK_BOX (self), scroller);
}
