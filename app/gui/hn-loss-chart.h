/* HnLossChart: the whole run's loss against step (raw and smoothed), the
 * learning rate on a second axis, eval loss as points; hover read-out,
 * auto-scaling, log scale, export as PNG and CSV. Drawn with cairo through
 * gtk_snapshot_append_cairo (GTK 4.8 has no GskPath). */
#pragma once
#include <gtk/gtk.h>

G_BEGIN_DECLS

#define HN_TYPE_LOSS_CHART (hn_loss_chart_get_type ())
G_DECLARE_FINAL_TYPE (HnLossChart, hn_loss_chart, HN, LOSS_CHART, GtkWidget)

GtkWidget *hn_loss_chart_new (void);
void hn_loss_chart_clear (HnLossChart *self);
/* Any of loss, lr, eval_loss may be NAN (not measured at this step). */
void hn_loss_chart_add_point (HnLossChart *self, gint64 step, double loss, double lr, double eval_loss);
guint hn_loss_chart_get_n_points (HnLossChart *self);
/* Another run overlaid for comparison (its own colour, named in a legend):
 * n points of steps and losses, eval_losses NAN where none (may be NULL). */
void hn_loss_chart_add_series (HnLossChart *self, const char *label, const gint64 *steps, const double *losses,
                               const double *eval_losses, guint n);
void hn_loss_chart_clear_series (HnLossChart *self);
guint hn_loss_chart_get_n_series (HnLossChart *self);
void hn_loss_chart_set_log_scale (HnLossChart *self, gboolean log_scale);
gboolean hn_loss_chart_get_log_scale (HnLossChart *self);
/* Exponential moving average weight, 0 (none) .. 0.99 (TensorBoard-style, debiased). */
void hn_loss_chart_set_smoothing (HnLossChart *self, double smoothing);
/* The smoothed loss at point i (for tests and the read-out). */
double hn_loss_chart_get_smoothed (HnLossChart *self, guint i);
/* The eval loss of point i (NAN where the step had no evaluation). */
double hn_loss_chart_get_eval_loss (HnLossChart *self, guint i);

/* Draws the chart into any cairo context of the given size (the widget,
 * PNG export and tests share this). */
void hn_loss_chart_draw (HnLossChart *self, cairo_t *cr, int width, int height);
gboolean hn_loss_chart_export_png (HnLossChart *self, const char *path, int width, int height, GError **error);
/* step,loss,smoothed_loss,lr,eval_loss; empty fields where not measured. */
gboolean hn_loss_chart_export_csv (HnLossChart *self, const char *path, GError **error);

G_END_DECLS
