#include "hn-progress-view.h"

#include <glib/gi18n.h>
#include <math.h>

struct _HnProgressView
{
  GtkWidget parent_instance;
  GtkWidget *bar;
  GtkWidget *label;
  HnJobController *controller;
  guint pulse_id;
  char *summary;   /* the last progress line without the time estimate */
};

G_DEFINE_FINAL_TYPE (HnProgressView, hn_progress_view, GTK_TYPE_WIDGET)

static char *
format_count (gint64 n)
{
  /* thousands separators as the locale writes them */
  return g_strdup_printf ("%'lld", (long long) n);
}

static char *
format_eta (double s)
{
  if (s < 90)
    return g_strdup (_("less than 2 minutes left"));
  if (s < 90 * 60)
    return g_strdup_printf (_("about %d minutes left"), (int) lround (s / 60));
  return g_strdup_printf (_("about %.1f hours left"), s / 3600);
}

static gboolean
pulse (gpointer data)
{
  gtk_progress_bar_pulse (GTK_PROGRESS_BAR (HN_PROGRESS_VIEW (data)->bar));
  return G_SOURCE_CONTINUE;
}

static void
stop_pulse (HnProgressView *self)
{
  if (self->pulse_id)
    g_source_remove (self->pulse_id);
  self->pulse_id = 0;
}

static void
on_started (HnJobController *c, HnProgressView *self)
{
  gtk_progress_bar_set_fraction (GTK_PROGRESS_BAR (self->bar), 0);
  gtk_label_set_text (GTK_LABEL (self->label), _("Starting…"));
  g_clear_pointer (&self->summary, g_free);
  stop_pulse (self);
  self->pulse_id = g_timeout_add (120, pulse, self);
}

static void
on_event (HnJobController *c, const HnJobEvent *e, HnProgressView *self)
{
  if (e->type == HN_JOB_EVENT_TURN_END)
    {
      /* an interactive job waits for the next input */
      stop_pulse (self);
      gtk_progress_bar_set_fraction (GTK_PROGRESS_BAR (self->bar), 0);
      gtk_label_set_text (GTK_LABEL (self->label), _("Waiting for your message"));
      return;
    }
  if (e->type != HN_JOB_EVENT_PROGRESS)
    return;
  stop_pulse (self);
  GString *s = g_string_new (NULL);
  /* downloads read "1.2 MB of 3.0 GB · 11.5 MB/s", not byte counts */
  gboolean bytes = e->progress.unit == HN_PROGRESS_BYTES;
  g_autofree char *step = bytes ? g_format_size ((guint64) MAX (e->progress.step, 0)) : format_count (e->progress.step);
  static const char *const unit_names[] = { N_("steps"), N_("tokens"), N_("bytes"), N_("items") };
  const char *unit = bytes ? "" : gettext (unit_names[e->progress.unit]);
  if (e->progress.total > 0)
    {
      g_autofree char *total = bytes ? g_format_size ((guint64) e->progress.total) : format_count (e->progress.total);
      /* TRANSLATORS: "1,200 of 5,000 steps" */
      if (bytes)
        /* TRANSLATORS: "1.2 MB of 3.0 GB" */
        g_string_append_printf (s, _("%s of %s"), step, total);
      else
        g_string_append_printf (s, _("%s of %s %s"), step, total, unit);
      gtk_progress_bar_set_fraction (GTK_PROGRESS_BAR (self->bar),
                                     CLAMP ((double) e->progress.step / (double) e->progress.total, 0, 1));
    }
  else
    {
      g_string_append_printf (s, bytes ? "%s%s" : "%s %s", step, unit);
      gtk_progress_bar_pulse (GTK_PROGRESS_BAR (self->bar));
    }
  if (bytes && isfinite (e->progress.tokens_per_s) && e->progress.tokens_per_s > 0)
    {
      g_autofree char *rate = g_format_size ((guint64) e->progress.tokens_per_s);
      /* TRANSLATORS: a download speed, "11.5 MB/s" */
      g_string_append_printf (s, _(" · %s/s"), rate);
    }
  else if (!bytes && isfinite (e->progress.tokens_per_s))
    g_string_append_printf (s, _(" · %.1f tokens/s"), e->progress.tokens_per_s);
  if (e->progress.device_bytes >= 0)
    {
      g_autofree char *mem = g_format_size ((guint64) e->progress.device_bytes);
      g_string_append_printf (s, _(" · %s on the device"), mem);
    }
  g_free (self->summary);
  self->summary = g_strdup (s->str);
  if (isfinite (e->progress.eta_s))
    {
      g_autofree char *eta = format_eta (e->progress.eta_s);
      g_string_append_printf (s, " — %s", eta);
    }
  gtk_label_set_text (GTK_LABEL (self->label), s->str);
  g_string_free (s, TRUE);
}

static void
on_finished (HnJobController *c, gboolean ok, const char *message, const char *output, HnProgressView *self)
{
  stop_pulse (self);
  if (ok)
    gtk_progress_bar_set_fraction (GTK_PROGRESS_BAR (self->bar), 1.0);
  HnJob *job = hn_job_controller_get_job (c);
  gboolean cancelled = message && job && g_cancellable_is_cancelled (hn_job_get_cancellable (job));
  g_autofree char *text = ok ? (self->summary ? g_strdup_printf (_("Done · %s"), self->summary) : g_strdup (_("Done")))
                          : cancelled ? g_strdup (_("Stopped"))
                                      : g_strdup_printf (_("Failed: %s"), message ? message : "");
  gtk_label_set_text (GTK_LABEL (self->label), text);
}

void
hn_progress_view_set_controller (HnProgressView *self, HnJobController *controller)
{
  if (self->controller)
    g_signal_handlers_disconnect_by_data (self->controller, self);
  g_set_object (&self->controller, controller);
  if (controller)
    {
      g_signal_connect (controller, "started", G_CALLBACK (on_started), self);
      g_signal_connect (controller, "event", G_CALLBACK (on_event), self);
      g_signal_connect (controller, "finished", G_CALLBACK (on_finished), self);
    }
}

const char *
hn_progress_view_get_text (HnProgressView *self)
{
  return gtk_label_get_text (GTK_LABEL (self->label));
}

static void
hn_progress_view_dispose (GObject *object)
{
  HnProgressView *self = HN_PROGRESS_VIEW (object);
  stop_pulse (self);
  g_clear_pointer (&self->summary, g_free);
  hn_progress_view_set_controller (self, NULL);
  g_clear_pointer (&self->bar, gtk_widget_unparent);
  g_clear_pointer (&self->label, gtk_widget_unparent);
  G_OBJECT_CLASS (hn_progress_view_parent_class)->dispose (object);
}

static void
hn_progress_view_class_init (HnProgressViewClass *klass)
{
  G_OBJECT_CLASS (klass)->dispose = hn_progress_view_dispose;
  gtk_widget_class_set_layout_manager_type (GTK_WIDGET_CLASS (klass), GTK_TYPE_BOX_LAYOUT);
}

static void
hn_progress_view_init (HnProgressView *self)
{
  gtk_orientable_set_orientation (GTK_ORIENTABLE (gtk_widget_get_layout_manager (GTK_WIDGET (self))),
                                  GTK_ORIENTATION_VERTICAL);
  gtk_box_layout_set_spacing (GTK_BOX_LAYOUT (gtk_widget_get_layout_manager (GTK_WIDGET (self))), 4);
  self->bar = gtk_progress_bar_new ();
  gtk_widget_set_parent (self->bar, GTK_WIDGET (self));
  self->label = gtk_label_new (_("Not started"));
  gtk_label_set_xalign (GTK_LABEL (self->label), 0);
  gtk_label_set_ellipsize (GTK_LABEL (self->label), PANGO_ELLIPSIZE_END);
  gtk_widget_add_css_class (self->label, "dim-label");
  gtk_widget_add_css_class (self->label, "numeric");
  gtk_widget_set_parent (self->label, GTK_WIDGET (self));
  gtk_accessible_update_property (GTK_ACCESSIBLE (self->bar), GTK_ACCESSIBLE_PROPERTY_LABEL, _("Job progress"), -1);
}
