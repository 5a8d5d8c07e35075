#include "hn-loss-chart.h"
#include "base/hn-error.h"
#include "base/hn-util.h"

#include <errno.h>
#include <glib/gi18n.h>
#include <math.h>
#include <stdio.h>
#include <pango/pangocairo.h>

typedef struct {
  gint64 step;
  double loss, lr, eval_loss, smoothed;
} Point;

struct _HnLossChart
{
  GtkWidget parent_instance;
  GArray *points;      /* Point, in arrival order (steps increase) */
  GPtrArray *series;   /* Series*: other runs overlaid for comparison */
  gboolean log_scale;
  double smoothing;
  double hover_x;      /* widget x of the pointer, or -1 */
};

enum { PROP_0, PROP_LOG_SCALE, PROP_SMOOTHING, PROP_N_POINTS, N_PROPS };
static GParamSpec *properties[N_PROPS];

G_DEFINE_FINAL_TYPE (HnLossChart, hn_loss_chart, GTK_TYPE_WIDGET)

#define M_LEFT 64.0
#define M_RIGHT 80.0
#define M_TOP 18.0
#define M_BOTTOM 40.0

typedef struct {
  char *label;
  GArray *points; /* Point (lr NAN) */
} Series;

static void
series_free (gpointer data)
{
  Series *s = data;
  g_free (s->label);
  g_array_unref (s->points);
  g_free (s);
}

/* Overlaid runs: distinct from the live run's blue, orange LR and green eval. */
static const double series_colors[][3] = {
  { 0.75, 0.11, 0.16 }, { 0.51, 0.24, 0.68 }, { 0.10, 0.55, 0.58 }, { 0.60, 0.45, 0.10 }, { 0.35, 0.35, 0.35 },
};

static void
smooth_points (GArray *points, double smoothing)
{
  /* debiased EMA, as TensorBoard does, so the start is not pulled to 0 */
  double ema = 0.0, weight = 0.0;
  for (guint i = 0; i < points->len; i++)
    {
      Point *p = &g_array_index (points, Point, i);
      if (!isfinite (p->loss))
        {
          p->smoothed = NAN;
          continue;
        }
      ema = smoothing * ema + (1.0 - smoothing) * p->loss;
      weight = smoothing * weight + (1.0 - smoothing);
      p->smoothed = ema / weight;
    }
}

static void
recompute_smoothing (HnLossChart *self)
{
  for (guint i = 0; i < self->series->len; i++)
    smooth_points (((Series *) self->series->pdata[i])->points, self->smoothing);
  smooth_points (self->points, self->smoothing);
}

static void
update_accessible (HnLossChart *self)
{
  g_autofree char *desc = NULL;
  if (self->points->len == 0)
    desc = g_strdup (_("No training steps yet"));
  else
    {
      Point *p = &g_array_index (self->points, Point, self->points->len - 1);
      desc = g_strdup_printf (_("%u steps; latest loss %.4f at step %lld"), self->points->len,
                              p->loss, (long long) p->step);
    }
  gtk_accessible_update_property (GTK_ACCESSIBLE (self), GTK_ACCESSIBLE_PROPERTY_DESCRIPTION, desc, -1);
}

void
hn_loss_chart_clear (HnLossChart *self)
{
  g_return_if_fail (HN_IS_LOSS_CHART (self));
  g_array_set_size (self->points, 0);
  update_accessible (self);
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_N_POINTS]);
  gtk_widget_queue_draw (GTK_WIDGET (self));
}

void
hn_loss_chart_add_series (HnLossChart *self, const char *label, const gint64 *steps, const double *losses,
                          const double *eval_losses, guint n)
{
  g_return_if_fail (HN_IS_LOSS_CHART (self));
  Series *sr = g_new0 (Series, 1);
  sr->label = g_strdup (label);
  sr->points = g_array_sized_new (FALSE, FALSE, sizeof (Point), n);
  for (guint i = 0; i < n; i++)
    {
      Point p = { steps[i], losses[i], NAN, eval_losses ? eval_losses[i] : NAN, NAN };
      g_array_append_val (sr->points, p);
    }
  smooth_points (sr->points, self->smoothing);
  g_ptr_array_add (self->series, sr);
  gtk_widget_queue_draw (GTK_WIDGET (self));
}

void
hn_loss_chart_clear_series (HnLossChart *self)
{
  g_return_if_fail (HN_IS_LOSS_CHART (self));
  g_ptr_array_set_size (self->series, 0);
  gtk_widget_queue_draw (GTK_WIDGET (self));
}

guint
hn_loss_chart_get_n_series (HnLossChart *self)
{
  return self->series->len;
}

void
hn_loss_chart_add_point (HnLossChart *self, gint64 step, double loss, double lr, double eval_loss)
{
  g_return_if_fail (HN_IS_LOSS_CHART (self));
  Point p = { step, loss, lr, eval_loss, NAN };
  /* fold an eval point for a step we already have into that point */
  if (self->points->len > 0)
    {
      Point *last = &g_array_index (self->points, Point, self->points->len - 1);
      if (last->step == step)
        {
          if (isfinite (loss))
            last->loss = loss;
          if (isfinite (lr))
            last->lr = lr;
          if (isfinite (eval_loss))
            last->eval_loss = eval_loss;
          recompute_smoothing (self);
          gtk_widget_queue_draw (GTK_WIDGET (self));
          return;
        }
    }
  g_array_append_val (self->points, p);
  /* incremental EMA would be cheaper, but a full pass over even 100k points
   * is well under a millisecond and keeps one code path */
  recompute_smoothing (self);
  update_accessible (self);
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_N_POINTS]);
  gtk_widget_queue_draw (GTK_WIDGET (self));
}

guint
hn_loss_chart_get_n_points (HnLossChart *self)
{
  g_return_val_if_fail (HN_IS_LOSS_CHART (self), 0);
  return self->points->len;
}

double
hn_loss_chart_get_smoothed (HnLossChart *self, guint i)
{
  g_return_val_if_fail (HN_IS_LOSS_CHART (self) && i < self->points->len, NAN);
  return g_array_index (self->points, Point, i).smoothed;
}

double
hn_loss_chart_get_eval_loss (HnLossChart *self, guint i)
{
  g_return_val_if_fail (HN_IS_LOSS_CHART (self) && i < self->points->len, NAN);
  return g_array_index (self->points, Point, i).eval_loss;
}

void
hn_loss_chart_set_log_scale (HnLossChart *self, gboolean log_scale)
{
  g_return_if_fail (HN_IS_LOSS_CHART (self));
  if (self->log_scale == !!log_scale)
    return;
  self->log_scale = !!log_scale;
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_LOG_SCALE]);
  gtk_widget_queue_draw (GTK_WIDGET (self));
}

gboolean
hn_loss_chart_get_log_scale (HnLossChart *self)
{
  return self->log_scale;
}

void
hn_loss_chart_set_smoothing (HnLossChart *self, double smoothing)
{
  g_return_if_fail (HN_IS_LOSS_CHART (self));
  smoothing = CLAMP (smoothing, 0.0, 0.99);
  if (self->smoothing == smoothing)
    return;
  self->smoothing = smoothing;
  recompute_smoothing (self);
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_SMOOTHING]);
  gtk_widget_queue_draw (GTK_WIDGET (self));
}

/* ---- drawing ---------------------------------------------------------- */

typedef struct {
  double x0, x1, y0, y1;  /* plot rectangle in pixels */
  double s_min, s_max;    /* steps */
  double l_min, l_max;    /* loss (log10 when log scale) */
  double r_min, r_max;    /* learning rate */
  gboolean has_lr;
} Frame;

static double
ytrans (HnLossChart *self, double loss)
{
  return self->log_scale ? log10 (MAX (loss, 1e-12)) : loss;
}

static double
px_x (const Frame *f, double step)
{
  double span = f->s_max - f->s_min;
  return f->x0 + (span > 0 ? (step - f->s_min) / span : 0.5) * (f->x1 - f->x0);
}

static double
px_y (const Frame *f, double v)
{
  double span = f->l_max - f->l_min;
  return f->y1 - (span > 0 ? (v - f->l_min) / span : 0.5) * (f->y1 - f->y0);
}

static double
px_lr (const Frame *f, double lr)
{
  double span = f->r_max - f->r_min;
  return f->y1 - (span > 0 ? (lr - f->r_min) / span : 0.5) * (f->y1 - f->y0);
}

static double
nice_step (double span, int target)
{
  if (span <= 0 || !isfinite (span))
    return 1.0;
  double raw = span / target;
  double mag = pow (10.0, floor (log10 (raw)));
  double n = raw / mag;
  return (n < 1.5 ? 1 : n < 3 ? 2 : n < 7 ? 5 : 10) * mag;
}

static void
compute_frame (HnLossChart *self, int width, int height, Frame *f)
{
  f->x0 = M_LEFT;
  f->x1 = MAX (width - M_RIGHT, M_LEFT + 10);
  f->y0 = M_TOP;
  f->y1 = MAX (height - M_BOTTOM, M_TOP + 10);
  f->s_min = G_MAXDOUBLE;
  f->s_max = -G_MAXDOUBLE;
  f->l_min = G_MAXDOUBLE;
  f->l_max = -G_MAXDOUBLE;
  f->r_min = 0.0;
  f->r_max = -G_MAXDOUBLE;
  f->has_lr = FALSE;
  for (guint i = 0; i < self->points->len; i++)
    {
      const Point *p = &g_array_index (self->points, Point, i);
      f->s_min = MIN (f->s_min, (double) p->step);
      f->s_max = MAX (f->s_max, (double) p->step);
      double vals[2] = { p->loss, p->eval_loss };
      for (int k = 0; k < 2; k++)
        if (isfinite (vals[k]) && (!self->log_scale || vals[k] > 0))
          {
            f->l_min = MIN (f->l_min, ytrans (self, vals[k]));
            f->l_max = MAX (f->l_max, ytrans (self, vals[k]));
          }
      if (isfinite (p->lr))
        {
          f->has_lr = TRUE;
          f->r_max = MAX (f->r_max, p->lr);
        }
    }
  for (guint k = 0; k < self->series->len; k++)
    {
      GArray *pts = ((Series *) self->series->pdata[k])->points;
      for (guint i = 0; i < pts->len; i++)
        {
          const Point *p = &g_array_index (pts, Point, i);
          f->s_min = MIN (f->s_min, (double) p->step);
          f->s_max = MAX (f->s_max, (double) p->step);
          double vals[2] = { p->loss, p->eval_loss };
          for (int j = 0; j < 2; j++)
            if (isfinite (vals[j]) && (!self->log_scale || vals[j] > 0))
              {
                f->l_min = MIN (f->l_min, ytrans (self, vals[j]));
                f->l_max = MAX (f->l_max, ytrans (self, vals[j]));
              }
        }
    }
  if (f->l_min > f->l_max)
    f->l_min = 0, f->l_max = 1;
  double pad = (f->l_max - f->l_min) * 0.06;
  if (pad == 0)
    pad = self->log_scale ? 0.1 : MAX (fabs (f->l_max) * 0.1, 0.1);
  f->l_min -= pad;
  f->l_max += pad;
  if (!self->log_scale && f->l_min < 0 && f->l_min + pad >= 0)
    f->l_min = 0; /* losses are not negative: do not draw below 0 for padding alone */
  if (f->s_min > f->s_max)
    f->s_min = 0, f->s_max = 1;
  if (f->s_min == f->s_max)
    f->s_max = f->s_min + 1;
  if (f->r_max <= 0)
    f->r_max = 1;
  f->r_max *= 1.06;
}

static void
draw_text (cairo_t *cr, PangoLayout *layout, const char *text, double x, double y, double xalign, double yalign)
{
  int w, h;
  pango_layout_set_text (layout, text, -1);
  pango_layout_get_pixel_size (layout, &w, &h);
  cairo_move_to (cr, x - xalign * w, y - yalign * h);
  pango_cairo_show_layout (cr, layout);
}

static char *
format_value (double v)
{
  double a = fabs (v);
  if (a != 0 && (a < 1e-2 || a >= 1e5))
    return g_strdup_printf ("%.1e", v);
  if (a >= 100)
    return g_strdup_printf ("%.0f", v);
  return g_strdup_printf ("%.3g", v);
}

static const Point *
hovered_point (HnLossChart *self, const Frame *f)
{
  if (self->hover_x < f->x0 - 4 || self->hover_x > f->x1 + 4 || self->points->len == 0)
    return NULL;
  const Point *best = NULL;
  double best_d = G_MAXDOUBLE;
  for (guint i = 0; i < self->points->len; i++)
    {
      const Point *p = &g_array_index (self->points, Point, i);
      double d = fabs (px_x (f, (double) p->step) - self->hover_x);
      if (d < best_d)
        best_d = d, best = p;
    }
  return best;
}

/* The overlaid runs: each its smoothed loss as a line, its eval loss as
 * dots, one colour per run, named in a legend at the top left. */
static void
draw_series (HnLossChart *self, cairo_t *cr, PangoLayout *layout, const Frame *f)
{
  for (guint k = 0; k < self->series->len; k++)
    {
      Series *sr = self->series->pdata[k];
      const double *c = series_colors[k % G_N_ELEMENTS (series_colors)];
      cairo_save (cr);
      cairo_rectangle (cr, f->x0, f->y0, f->x1 - f->x0, f->y1 - f->y0);
      cairo_clip (cr);
      cairo_set_source_rgba (cr, c[0], c[1], c[2], 1.0);
      cairo_set_line_width (cr, 2.0);
      gboolean started = FALSE;
      for (guint i = 0; i < sr->points->len; i++)
        {
          const Point *p = &g_array_index (sr->points, Point, i);
          if (!isfinite (p->smoothed) || (self->log_scale && p->smoothed <= 0))
            continue;
          double x = px_x (f, (double) p->step), y = px_y (f, ytrans (self, p->smoothed));
          started ? cairo_line_to (cr, x, y) : cairo_move_to (cr, x, y);
          started = TRUE;
        }
      cairo_stroke (cr);
      for (guint i = 0; i < sr->points->len; i++)
        {
          const Point *p = &g_array_index (sr->points, Point, i);
          if (!isfinite (p->eval_loss) || (self->log_scale && p->eval_loss <= 0))
            continue;
          cairo_rectangle (cr, px_x (f, (double) p->step) - 3, px_y (f, ytrans (self, p->eval_loss)) - 3, 6, 6);
          cairo_fill (cr);
        }
      cairo_restore (cr);
      /* legend entry */
      double ly = f->y0 + 8 + 16 * k;
      cairo_set_source_rgba (cr, c[0], c[1], c[2], 1.0);
      cairo_rectangle (cr, f->x0 + 10, ly + 4, 14, 4);
      cairo_fill (cr);
      draw_text (cr, layout, sr->label, f->x0 + 30, ly + 6, 0.0, 0.5);
    }
}

static void
draw_chart (HnLossChart *self, cairo_t *cr, int width, int height, GdkRGBA fg)
{

  Frame f;
  compute_frame (self, width, height, &f);
  PangoLayout *layout = pango_cairo_create_layout (cr);
  PangoFontDescription *font = pango_font_description_from_string ("Sans 9");
  pango_layout_set_font_description (layout, font);
  pango_font_description_free (font);

  /* frame and grid */
  cairo_set_line_width (cr, 1.0);
  cairo_set_source_rgba (cr, fg.red, fg.green, fg.blue, 0.12);
  double lstep = nice_step (f.l_max - f.l_min, 5);
  for (double v = ceil (f.l_min / lstep) * lstep; v <= f.l_max + 1e-12; v += lstep)
    {
      double y = round (px_y (&f, v)) + 0.5;
      cairo_move_to (cr, f.x0, y);
      cairo_line_to (cr, f.x1, y);
    }
  cairo_stroke (cr);
  cairo_set_source_rgba (cr, fg.red, fg.green, fg.blue, 0.45);
  cairo_rectangle (cr, f.x0 + 0.5, f.y0 + 0.5, f.x1 - f.x0, f.y1 - f.y0);
  cairo_stroke (cr);

  /* axis labels */
  cairo_set_source_rgba (cr, fg.red, fg.green, fg.blue, 0.8);
  for (double v = ceil (f.l_min / lstep) * lstep; v <= f.l_max + 1e-12; v += lstep)
    {
      g_autofree char *t = format_value (self->log_scale ? pow (10.0, v) : v);
      draw_text (cr, layout, t, f.x0 - 6, px_y (&f, v), 1.0, 0.5);
    }
  double sstep = MAX (1.0, nice_step (f.s_max - f.s_min, 6));
  for (double s = ceil (f.s_min / sstep) * sstep; s <= f.s_max + 1e-9; s += sstep)
    {
      g_autofree char *t = g_strdup_printf ("%.0f", s);
      draw_text (cr, layout, t, px_x (&f, s), f.y1 + 4, 0.5, 0.0);
    }
  draw_text (cr, layout, _("step"), (f.x0 + f.x1) / 2, height - 4, 0.5, 1.0);
  cairo_save (cr);
  cairo_translate (cr, 12, (f.y0 + f.y1) / 2);
  cairo_rotate (cr, -G_PI / 2);
  draw_text (cr, layout, self->log_scale ? _("loss (log scale)") : _("loss"), 0, 0, 0.5, 0.5);
  cairo_restore (cr);

  draw_series (self, cr, layout, &f);
  if (self->points->len == 0)
    {
      if (self->series->len > 0)
        {
          g_object_unref (layout);
          return;
        }
      draw_text (cr, layout, _("The loss curve appears here when training starts"),
                 (f.x0 + f.x1) / 2, (f.y0 + f.y1) / 2, 0.5, 0.5);
      g_object_unref (layout);
      return;
    }

  cairo_save (cr);
  cairo_rectangle (cr, f.x0, f.y0, f.x1 - f.x0, f.y1 - f.y0);
  cairo_clip (cr);
  cairo_set_line_join (cr, CAIRO_LINE_JOIN_ROUND);

  /* learning rate, right axis */
  if (f.has_lr)
    {
      cairo_set_source_rgba (cr, 0.90, 0.38, 0.0, 0.85);
      cairo_set_line_width (cr, 1.5);
      gboolean started = FALSE;
      for (guint i = 0; i < self->points->len; i++)
        {
          const Point *p = &g_array_index (self->points, Point, i);
          if (!isfinite (p->lr))
            continue;
          double x = px_x (&f, (double) p->step), y = px_lr (&f, p->lr);
          started ? cairo_line_to (cr, x, y) : cairo_move_to (cr, x, y);
          started = TRUE;
        }
      cairo_stroke (cr);
    }

  /* raw loss (faint) then smoothed (strong) */
  for (int pass = 0; pass < 2; pass++)
    {
      if (pass == 0)
        cairo_set_source_rgba (cr, 0.21, 0.52, 0.89, 0.35), cairo_set_line_width (cr, 1.0);
      else
        cairo_set_source_rgba (cr, 0.11, 0.44, 0.85, 1.0), cairo_set_line_width (cr, 2.5);
      gboolean started = FALSE;
      for (guint i = 0; i < self->points->len; i++)
        {
          const Point *p = &g_array_index (self->points, Point, i);
          double v = pass == 0 ? p->loss : p->smoothed;
          if (!isfinite (v) || (self->log_scale && v <= 0))
            continue;
          double x = px_x (&f, (double) p->step), y = px_y (&f, ytrans (self, v));
          started ? cairo_line_to (cr, x, y) : cairo_move_to (cr, x, y);
          started = TRUE;
        }
      if (self->points->len == 1 && started)
        {
          /* a single point: draw a dot so the first step is visible */
          double x, y;
          cairo_get_current_point (cr, &x, &y);
          cairo_new_path (cr);
          cairo_arc (cr, x, y, 3.0, 0, 2 * G_PI);
          cairo_fill (cr);
        }
      else
        cairo_stroke (cr);
    }

  /* eval loss as dots */
  cairo_set_source_rgba (cr, 0.18, 0.76, 0.49, 1.0);
  for (guint i = 0; i < self->points->len; i++)
    {
      const Point *p = &g_array_index (self->points, Point, i);
      if (!isfinite (p->eval_loss) || (self->log_scale && p->eval_loss <= 0))
        continue;
      cairo_arc (cr, px_x (&f, (double) p->step), px_y (&f, ytrans (self, p->eval_loss)), 3.5, 0, 2 * G_PI);
      cairo_fill (cr);
    }
  cairo_restore (cr);

  /* LR axis labels */
  if (f.has_lr)
    {
      cairo_set_source_rgba (cr, 0.90, 0.38, 0.0, 1.0);
      double rstep = nice_step (f.r_max - f.r_min, 4);
      for (double v = 0; v <= f.r_max + 1e-18; v += rstep)
        {
          g_autofree char *t = format_value (v);
          draw_text (cr, layout, t, f.x1 + 6, px_lr (&f, v), 0.0, 0.5);
        }
      cairo_save (cr);
      cairo_translate (cr, width - 8, (f.y0 + f.y1) / 2);
      cairo_rotate (cr, G_PI / 2);
      draw_text (cr, layout, _("learning rate"), 0, 0, 0.5, 0.5);
      cairo_restore (cr);
    }

  /* hover read-out */
  const Point *h = hovered_point (self, &f);
  if (h)
    {
      double x = px_x (&f, (double) h->step);
      cairo_set_source_rgba (cr, fg.red, fg.green, fg.blue, 0.5);
      cairo_set_line_width (cr, 1.0);
      cairo_move_to (cr, round (x) + 0.5, f.y0);
      cairo_line_to (cr, round (x) + 0.5, f.y1);
      cairo_stroke (cr);
      GString *s = g_string_new (NULL);
      g_string_append_printf (s, _("step %lld"), (long long) h->step);
      if (isfinite (h->loss))
        g_string_append_printf (s, "\n%s %.4f", _("loss"), h->loss);
      if (isfinite (h->smoothed))
        g_string_append_printf (s, "\n%s %.4f", _("smoothed"), h->smoothed);
      if (isfinite (h->lr))
        g_string_append_printf (s, "\n%s %.3e", _("learning rate"), h->lr);
      if (isfinite (h->eval_loss))
        g_string_append_printf (s, "\n%s %.4f", _("eval loss"), h->eval_loss);
      pango_layout_set_text (layout, s->str, -1);
      int tw, th;
      pango_layout_get_pixel_size (layout, &tw, &th);
      double bx = x + 10 + tw + 12 > f.x1 ? x - 10 - tw - 12 : x + 10;
      double by = f.y0 + 8;
      cairo_set_source_rgba (cr, 0.12, 0.12, 0.14, 0.88);
      cairo_rectangle (cr, bx, by, tw + 12, th + 8);
      cairo_fill (cr);
      cairo_set_source_rgba (cr, 1, 1, 1, 1);
      cairo_move_to (cr, bx + 6, by + 4);
      pango_cairo_show_layout (cr, layout);
      g_string_free (s, TRUE);
    }
  g_object_unref (layout);
}

void
hn_loss_chart_draw (HnLossChart *self, cairo_t *cr, int width, int height)
{
  g_return_if_fail (HN_IS_LOSS_CHART (self));
  GdkRGBA fg = { 0.2, 0.2, 0.2, 1 };
  /* text and grid follow the theme (light or dark) */
  gtk_style_context_get_color (gtk_widget_get_style_context (GTK_WIDGET (self)), &fg);
  draw_chart (self, cr, width, height, fg);
}

static void
hn_loss_chart_snapshot (GtkWidget *widget, GtkSnapshot *snapshot)
{
  int w = gtk_widget_get_width (widget), h = gtk_widget_get_height (widget);
  if (w <= 0 || h <= 0)
    return;
  cairo_t *cr = gtk_snapshot_append_cairo (snapshot, &GRAPHENE_RECT_INIT (0, 0, w, h));
  hn_loss_chart_draw (HN_LOSS_CHART (widget), cr, w, h);
  cairo_destroy (cr);
}

static void
hn_loss_chart_measure (GtkWidget *widget, GtkOrientation orientation, int for_size, int *minimum,
                       int *natural, int *minimum_baseline, int *natural_baseline)
{
  *minimum = orientation == GTK_ORIENTATION_HORIZONTAL ? 240 : 160;
  *natural = orientation == GTK_ORIENTATION_HORIZONTAL ? 560 : 300;
}

gboolean
hn_loss_chart_export_png (HnLossChart *self, const char *path, int width, int height, GError **error)
{
  g_return_val_if_fail (HN_IS_LOSS_CHART (self), FALSE);
  cairo_surface_t *surface = cairo_image_surface_create (CAIRO_FORMAT_ARGB32, width, height);
  cairo_t *cr = cairo_create (surface);
  cairo_set_source_rgb (cr, 1, 1, 1); /* exported charts get a white page: they end up in documents */
  cairo_paint (cr);
  double saved = self->hover_x;
  self->hover_x = -1;
  draw_chart (self, cr, width, height, (GdkRGBA) { 0.15, 0.15, 0.15, 1.0 });
  self->hover_x = saved;
  cairo_destroy (cr);
  g_autofree char *tmp = g_strdup_printf ("%s.tmp", path);
  cairo_status_t st = cairo_surface_write_to_png (surface, tmp);
  cairo_surface_destroy (surface);
  if (st != CAIRO_STATUS_SUCCESS || rename (tmp, path) != 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_IO, _("Could not write %s: %s"), path,
                   st != CAIRO_STATUS_SUCCESS ? cairo_status_to_string (st) : g_strerror (errno));
      remove (tmp);
      return FALSE;
    }
  return TRUE;
}

static void
csv_value (GString *s, double v)
{
  g_string_append_c (s, ',');
  if (isfinite (v))
    {
      char buf[G_ASCII_DTOSTR_BUF_SIZE];
      g_string_append (s, g_ascii_dtostr (buf, sizeof buf, v));
    }
}

gboolean
hn_loss_chart_export_csv (HnLossChart *self, const char *path, GError **error)
{
  g_return_val_if_fail (HN_IS_LOSS_CHART (self), FALSE);
  GString *s = g_string_new ("step,loss,smoothed_loss,lr,eval_loss\n");
  for (guint i = 0; i < self->points->len; i++)
    {
      const Point *p = &g_array_index (self->points, Point, i);
      g_string_append_printf (s, "%" G_GINT64_FORMAT, p->step);
      csv_value (s, p->loss);
      csv_value (s, p->smoothed);
      csv_value (s, p->lr);
      csv_value (s, p->eval_loss);
      g_string_append_c (s, '\n');
    }
  gboolean ok = hn_write_file_atomic (path, s->str, s->len, error);
  g_string_free (s, TRUE);
  return ok;
}

static void
on_motion (GtkEventControllerMotion *motion, double x, double y, HnLossChart *self)
{
  self->hover_x = x;
  gtk_widget_queue_draw (GTK_WIDGET (self));
}

static void
on_leave (GtkEventControllerMotion *motion, HnLossChart *self)
{
  self->hover_x = -1;
  gtk_widget_queue_draw (GTK_WIDGET (self));
}

static void
hn_loss_chart_finalize (GObject *object)
{
  HnLossChart *self = HN_LOSS_CHART (object);
  g_array_unref (self->points);
  g_ptr_array_unref (self->series);
  G_OBJECT_CLASS (hn_loss_chart_parent_class)->finalize (object);
}

static void
hn_loss_chart_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  HnLossChart *self = HN_LOSS_CHART (object);
  switch (prop_id)
    {
    case PROP_LOG_SCALE: g_value_set_boolean (value, self->log_scale); break;
    case PROP_SMOOTHING: g_value_set_double (value, self->smoothing); break;
    case PROP_N_POINTS: g_value_set_uint (value, self->points->len); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
hn_loss_chart_set_property (GObject *object, guint prop_id, const GValue *value, GParamSpec *pspec)
{
  HnLossChart *self = HN_LOSS_CHART (object);
  switch (prop_id)
    {
    case PROP_LOG_SCALE: hn_loss_chart_set_log_scale (self, g_value_get_boolean (value)); break;
    case PROP_SMOOTHING: hn_loss_chart_set_smoothing (self, g_value_get_double (value)); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
hn_loss_chart_class_init (HnLossChartClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  GtkWidgetClass *widget_class = GTK_WIDGET_CLASS (klass);
  object_class->finalize = hn_loss_chart_finalize;
  object_class->get_property = hn_loss_chart_get_property;
  object_class->set_property = hn_loss_chart_set_property;
  widget_class->snapshot = hn_loss_chart_snapshot;
  widget_class->measure = hn_loss_chart_measure;
  properties[PROP_LOG_SCALE] = g_param_spec_boolean ("log-scale", NULL, NULL, FALSE,
                                                     G_PARAM_READWRITE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);
  properties[PROP_SMOOTHING] = g_param_spec_double ("smoothing", NULL, NULL, 0.0, 0.99, 0.9,
                                                    G_PARAM_READWRITE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);
  properties[PROP_N_POINTS] = g_param_spec_uint ("n-points", NULL, NULL, 0, G_MAXUINT, 0,
                                                 G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
  g_object_class_install_properties (object_class, N_PROPS, properties);
  gtk_widget_class_set_css_name (widget_class, "losschart");
  gtk_widget_class_set_accessible_role (widget_class, GTK_ACCESSIBLE_ROLE_IMG);
}

static void
hn_loss_chart_init (HnLossChart *self)
{
  self->points = g_array_new (FALSE, FALSE, sizeof (Point));
  self->series = g_ptr_array_new_with_free_func (series_free);
  self->smoothing = 0.9;
  self->hover_x = -1;
  GtkEventController *motion = gtk_event_controller_motion_new ();
  g_signal_connect (motion, "motion", G_CALLBACK (on_motion), self);
  g_signal_connect (motion, "leave", G_CALLBACK (on_leave), self);
  gtk_widget_add_controller (GTK_WIDGET (self), motion);
  gtk_accessible_update_property (GTK_ACCESSIBLE (self), GTK_ACCESSIBLE_PROPERTY_LABEL, _("Loss chart"), -1);
  update_accessible (self);
}

GtkWidget *
hn_loss_chart_new (void)
{
  return g_object_new (HN_TYPE_LOSS_CHART, NULL);
}
