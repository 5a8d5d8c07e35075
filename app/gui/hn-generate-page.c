#include "hn-generate-page.h"
#include "hn-command-view.h"
#include "hn-memory-row.h"
#include "hn-option-group.h"
#include "hn-page-util.h"
#include "hn-progress-view.h"

#include <glib/gi18n.h>
#include <string.h>

struct _HnGeneratePage
{
  AdwBin parent_instance;
  HnJobSpec *spec;
  HnJobController *controller;
  char *problem;
  GPtrArray *outputs;   /* GString per sequence */
  gboolean syncing;     /* writing prompts into the spec */

  GtkWidget *model_group, *sampling_group, *cache_group, *run_group;
  GtkWidget *extra_group;
  GtkWidget *prompt_view, *extra_view, *output_view;
  GtkWidget *progress, *command, *reason, *memory;
};

G_DEFINE_FINAL_TYPE (HnGeneratePage, hn_generate_page, ADW_TYPE_BIN)

static char *
buffer_text (GtkWidget *view)
{
  GtkTextBuffer *buf = gtk_text_view_get_buffer (GTK_TEXT_VIEW (view));
  GtkTextIter a, b;
  gtk_text_buffer_get_bounds (buf, &a, &b);
  return gtk_text_buffer_get_text (buf, &a, &b, FALSE);
}

static void
update_state (HnGeneratePage *self)
{
  GtkWidget *gs[] = { self->model_group, self->sampling_group, self->cache_group, self->run_group, NULL };
  g_free (self->problem);
  self->problem = hn_page_start_problem (self->spec, gs);
  if (!self->problem)
    self->problem = hn_memory_row_dup_problem (HN_MEMORY_ROW (self->memory));
  gboolean running = hn_job_controller_get_running (self->controller);
  gtk_label_set_text (GTK_LABEL (self->reason), running || !self->problem ? "" : self->problem);
  gtk_widget_action_set_enabled (GTK_WIDGET (self), "page.start", !running && !self->problem);
  gtk_widget_action_set_enabled (GTK_WIDGET (self), "page.stop", running);
  gboolean batching = hn_job_spec_get_bool (self->spec, "continuous-batching");
  gtk_widget_set_visible (self->extra_group, batching);
  /* the request limit only means something with batching on */
  GtkWidget *max_row = hn_option_group_get_row (HN_OPTION_GROUP (self->cache_group), "continuous-batch-max-requests");
  if (max_row)
    gtk_widget_set_sensitive (max_row, batching);
}

/* The prompt view and the extra prompts become the repeatable --prompt. */
static void
sync_prompts (HnGeneratePage *self)
{
  g_autofree char *main_prompt = buffer_text (self->prompt_view);
  g_autoptr (GPtrArray) prompts = g_ptr_array_new_with_free_func (g_free);
  if (*main_prompt)
    g_ptr_array_add (prompts, g_strdup (main_prompt));
  if (hn_job_spec_get_bool (self->spec, "continuous-batching"))
    {
      g_autofree char *extra = buffer_text (self->extra_view);
      g_auto (GStrv) lines = g_strsplit (extra, "\n", -1);
      for (char **l = lines; *l; l++)
        if (*g_strstrip (*l))
          g_ptr_array_add (prompts, g_strdup (*l));
    }
  g_ptr_array_add (prompts, NULL);
  self->syncing = TRUE;
  hn_job_spec_set_strv (self->spec, "prompt", (const char *const *) prompts->pdata);
  self->syncing = FALSE;
}

static void
on_buffer_changed (GtkTextBuffer *buffer, HnGeneratePage *self)
{
  sync_prompts (self);
}

static void
on_spec_changed (HnJobSpec *spec, const char *name, HnGeneratePage *self)
{
  if (g_str_equal (name, "continuous-batching"))
    sync_prompts (self);
  update_state (self);
}

static void
on_problems_changed (HnOptionGroup *group, HnGeneratePage *self)
{
  update_state (self);
}

static void
render_outputs (HnGeneratePage *self)
{
  GtkTextBuffer *buf = gtk_text_view_get_buffer (GTK_TEXT_VIEW (self->output_view));
  if (self->outputs->len <= 1)
    {
      GString *s = self->outputs->len ? g_ptr_array_index (self->outputs, 0) : NULL;
      g_autofree char *valid = g_utf8_make_valid (s ? s->str : "", -1);
      gtk_text_buffer_set_text (buf, valid, -1);
      return;
    }
  GString *all = g_string_new (NULL);
  for (guint i = 0; i < self->outputs->len; i++)
    {
      GString *s = g_ptr_array_index (self->outputs, i);
      g_string_append_printf (all, "%s── %s %u ──\n%s\n", i ? "\n" : "", _("Sequence"), i + 1, s->str);
    }
  /* a model may emit a byte sequence that is not UTF-8 (yet): show U+FFFD */
  g_autofree char *valid = g_utf8_make_valid (all->str, -1);
  gtk_text_buffer_set_text (buf, valid, -1);
  g_string_free (all, TRUE);
}

static void
on_event (HnJobController *c, const HnJobEvent *e, HnGeneratePage *self)
{
  if (e->type != HN_JOB_EVENT_TOKEN)
    return;
  while (self->outputs->len <= e->token.sequence)
    g_ptr_array_add (self->outputs, g_string_new (NULL));
  g_string_append (g_ptr_array_index (self->outputs, e->token.sequence), e->token.text);
  if (self->outputs->len == 1 && g_utf8_validate (e->token.text, -1, NULL))
    {
      /* one stream: append at the end rather than re-render */
      GtkTextBuffer *buf = gtk_text_view_get_buffer (GTK_TEXT_VIEW (self->output_view));
      GtkTextIter end;
      gtk_text_buffer_get_end_iter (buf, &end);
      gtk_text_buffer_insert (buf, &end, e->token.text, -1);
    }
  else
    render_outputs (self);
}

static void
on_started (HnJobController *c, HnGeneratePage *self)
{
  g_ptr_array_set_size (self->outputs, 0);
  /* the prompt itself starts the output, as the CLI prints it */
  const char *const *prompts = hn_job_spec_get_strv (self->spec, "prompt");
  for (guint i = 0; prompts[i]; i++)
    g_ptr_array_add (self->outputs, g_string_new (prompts[i]));
  render_outputs (self);
  update_state (self);
}

static void
on_finished (HnJobController *c, gboolean ok, const char *message, const char *output, HnGeneratePage *self)
{
  update_state (self);
  HnJob *job = hn_job_controller_get_job (c);
  if (!ok && !(job && g_cancellable_is_cancelled (hn_job_get_cancellable (job))))
    {
      g_autofree char *text = g_strdup_printf (_("Generation failed: %s"), message ? message : _("unknown error"));
      hn_page_toast (GTK_WIDGET (self), text);
    }
}

static void
start_action (GtkWidget *widget, const char *action, GVariant *param)
{
  HnGeneratePage *self = HN_GENERATE_PAGE (widget);
  g_autoptr (GError) error = NULL;
  sync_prompts (self);
  update_state (self);
  if (self->problem)
    return;
  hn_page_remember (self->spec);
  if (!hn_job_controller_start (self->controller, self->spec, &error))
    hn_page_toast (widget, error->message);
}

static void
stop_action (GtkWidget *widget, const char *action, GVariant *param)
{
  hn_job_controller_stop (HN_GENERATE_PAGE (widget)->controller);
}

HnJobSpec *
hn_generate_page_get_spec (HnGeneratePage *self)
{
  return self->spec;
}

HnJobController *
hn_generate_page_get_controller (HnGeneratePage *self)
{
  return self->controller;
}

void
hn_generate_page_set_prompt (HnGeneratePage *self, const char *prompt)
{
  gtk_text_buffer_set_text (gtk_text_view_get_buffer (GTK_TEXT_VIEW (self->prompt_view)), prompt, -1);
}

void
hn_generate_page_set_extra_prompts (HnGeneratePage *self, const char *prompts)
{
  gtk_text_buffer_set_text (gtk_text_view_get_buffer (GTK_TEXT_VIEW (self->extra_view)), prompts, -1);
}

char *
hn_generate_page_dup_output (HnGeneratePage *self)
{
  return buffer_text (self->output_view);
}

const char *
hn_generate_page_get_command_text (HnGeneratePage *self)
{
  return hn_command_view_get_text (HN_COMMAND_VIEW (self->command));
}

GtkWidget *
hn_generate_page_get_memory_row (HnGeneratePage *self)
{
  return self->memory;
}

const char *
hn_generate_page_get_start_problem (HnGeneratePage *self)
{
  return self->problem;
}

static void
hn_generate_page_dispose (GObject *object)
{
  HnGeneratePage *self = HN_GENERATE_PAGE (object);
  if (self->spec)
    g_signal_handlers_disconnect_by_data (self->spec, self);
  if (self->controller)
    {
      g_signal_handlers_disconnect_by_data (self->controller, self);
      hn_job_controller_stop (self->controller);
    }
  gtk_widget_dispose_template (GTK_WIDGET (self), HN_TYPE_GENERATE_PAGE);
  g_clear_object (&self->controller);
  g_clear_object (&self->spec);
  G_OBJECT_CLASS (hn_generate_page_parent_class)->dispose (object);
}

static void
hn_generate_page_finalize (GObject *object)
{
  HnGeneratePage *self = HN_GENERATE_PAGE (object);
  g_free (self->problem);
  g_ptr_array_unref (self->outputs);
  G_OBJECT_CLASS (hn_generate_page_parent_class)->finalize (object);
}

static void
string_free (gpointer s)
{
  g_string_free (s, TRUE);
}

static void
hn_generate_page_class_init (HnGeneratePageClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  GtkWidgetClass *widget_class = GTK_WIDGET_CLASS (klass);
  object_class->dispose = hn_generate_page_dispose;
  object_class->finalize = hn_generate_page_finalize;
  g_type_ensure (HN_TYPE_OPTION_GROUP);
  g_type_ensure (HN_TYPE_PROGRESS_VIEW);
  g_type_ensure (HN_TYPE_COMMAND_VIEW);
  g_type_ensure (HN_TYPE_MEMORY_ROW);
  gtk_widget_class_set_template_from_resource (widget_class, "/io/github/hierarchos/Native/hn-generate-page.ui");
  gtk_widget_class_bind_template_child (widget_class, HnGeneratePage, model_group);
  gtk_widget_class_bind_template_child (widget_class, HnGeneratePage, sampling_group);
  gtk_widget_class_bind_template_child (widget_class, HnGeneratePage, cache_group);
  gtk_widget_class_bind_template_child (widget_class, HnGeneratePage, run_group);
  gtk_widget_class_bind_template_child (widget_class, HnGeneratePage, extra_group);
  gtk_widget_class_bind_template_child (widget_class, HnGeneratePage, prompt_view);
  gtk_widget_class_bind_template_child (widget_class, HnGeneratePage, extra_view);
  gtk_widget_class_bind_template_child (widget_class, HnGeneratePage, output_view);
  gtk_widget_class_bind_template_child (widget_class, HnGeneratePage, progress);
  gtk_widget_class_bind_template_child (widget_class, HnGeneratePage, command);
  gtk_widget_class_bind_template_child (widget_class, HnGeneratePage, reason);
  gtk_widget_class_bind_template_child (widget_class, HnGeneratePage, memory);
  gtk_widget_class_install_action (widget_class, "page.start", NULL, start_action);
  gtk_widget_class_install_action (widget_class, "page.stop", NULL, stop_action);
}

static void
hn_generate_page_init (HnGeneratePage *self)
{
  gtk_widget_init_template (GTK_WIDGET (self));
  self->outputs = g_ptr_array_new_with_free_func (string_free);
  self->spec = hn_job_spec_new ("transformer-generate", NULL);
  hn_page_apply_defaults (self->spec);
  self->controller = hn_job_controller_new ();
  g_signal_connect (self->controller, "event", G_CALLBACK (on_event), self);
  g_signal_connect (self->controller, "started", G_CALLBACK (on_started), self);
  g_signal_connect (self->controller, "finished", G_CALLBACK (on_finished), self);
  hn_progress_view_set_controller (HN_PROGRESS_VIEW (self->progress), self->controller);

  GtkWidget *gs[] = { self->model_group, self->sampling_group, self->cache_group, self->run_group };
  for (guint i = 0; i < G_N_ELEMENTS (gs); i++)
    {
      hn_option_group_set_spec (HN_OPTION_GROUP (gs[i]), self->spec);
      g_signal_connect (gs[i], "problems-changed", G_CALLBACK (on_problems_changed), self);
    }
  hn_command_view_set_spec (HN_COMMAND_VIEW (self->command), self->spec);
  hn_memory_row_set_spec (HN_MEMORY_ROW (self->memory), self->spec);
  g_signal_connect_swapped (self->memory, "changed", G_CALLBACK (update_state), self);
  g_signal_connect (gtk_text_view_get_buffer (GTK_TEXT_VIEW (self->prompt_view)), "changed",
                    G_CALLBACK (on_buffer_changed), self);
  g_signal_connect (gtk_text_view_get_buffer (GTK_TEXT_VIEW (self->extra_view)), "changed",
                    G_CALLBACK (on_buffer_changed), self);
  g_signal_connect (self->spec, "changed", G_CALLBACK (on_spec_changed), self);
  /* the demo model writes children's stories in English: a prompt it knows */
  hn_generate_page_set_prompt (self, "Once upon a time");
  update_state (self);
}

GtkWidget *
hn_generate_page_new (void)
{
  return g_object_new (HN_TYPE_GENERATE_PAGE, NULL);
}
