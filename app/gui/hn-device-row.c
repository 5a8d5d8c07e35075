#include "hn-device-row.h"
#include "hn-devices.h"

#include <glib/gi18n.h>

struct _HnDeviceRow
{
  AdwComboRow parent_instance;
  HnDevices *devices;
  GtkStringList *labels;
  GArray *indices;     /* device index per list item; item 0 = -1 (automatic) */
  int device_index;    /* wanted index, kept even before the list is in */
  gboolean updating;
};

enum { PROP_0, PROP_DEVICE_INDEX, N_PROPS };
static GParamSpec *properties[N_PROPS];

G_DEFINE_FINAL_TYPE (HnDeviceRow, hn_device_row, ADW_TYPE_COMBO_ROW)

static void
select_index (HnDeviceRow *self)
{
  guint sel = 0;
  for (guint i = 0; i < self->indices->len; i++)
    if (g_array_index (self->indices, int, i) == self->device_index)
      sel = i;
  self->updating = TRUE;
  adw_combo_row_set_selected (ADW_COMBO_ROW (self), sel);
  self->updating = FALSE;
}

static void
refill (HnDeviceRow *self)
{
  guint n = g_list_model_get_n_items (G_LIST_MODEL (self->labels));
  g_array_set_size (self->indices, 0);
  int automatic = -1;
  g_array_append_val (self->indices, automatic);
  g_autoptr (GPtrArray) items = g_ptr_array_new_with_free_func (g_free);
  g_ptr_array_add (items, g_strdup (_("Automatic (the best device)")));
  if (!hn_devices_is_ready (self->devices))
    adw_action_row_set_subtitle (ADW_ACTION_ROW (self), _("Detecting devices…"));
  else
    {
      GPtrArray *entries = hn_devices_get_entries (self->devices);
      for (guint i = 0; i < entries->len; i++)
        {
          const HnDeviceEntry *e = g_ptr_array_index (entries, i);
          g_ptr_array_add (items, hn_device_entry_describe (e));
          g_array_append_val (self->indices, e->index);
        }
      if (entries->len == 0)
        {
          g_autofree char *msg = g_strdup_printf (_("No Vulkan device: %s"), hn_devices_get_error (self->devices)
                                                                              ? hn_devices_get_error (self->devices)
                                                                              : _("the driver reports none"));
          adw_action_row_set_subtitle (ADW_ACTION_ROW (self), msg);
        }
      else
        adw_action_row_set_subtitle (ADW_ACTION_ROW (self), _("The Vulkan device the job runs on"));
    }
  g_ptr_array_add (items, NULL);
  self->updating = TRUE;
  gtk_string_list_splice (self->labels, 0, n, (const char *const *) items->pdata);
  self->updating = FALSE;
  select_index (self);
}

static void
on_ready (HnDevices *devices, GParamSpec *pspec, HnDeviceRow *self)
{
  refill (self);
}

static void
on_selected (HnDeviceRow *self, GParamSpec *pspec, gpointer data)
{
  if (self->updating)
    return;
  guint sel = adw_combo_row_get_selected (ADW_COMBO_ROW (self));
  if (sel >= self->indices->len)
    return;
  int idx = g_array_index (self->indices, int, sel);
  if (idx != self->device_index)
    {
      self->device_index = idx;
      g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_DEVICE_INDEX]);
    }
}

int
hn_device_row_get_device_index (HnDeviceRow *self)
{
  return self->device_index;
}

void
hn_device_row_set_device_index (HnDeviceRow *self, int index)
{
  if (self->device_index == index)
    return;
  self->device_index = index;
  select_index (self);
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_DEVICE_INDEX]);
}

static void
hn_device_row_dispose (GObject *object)
{
  HnDeviceRow *self = HN_DEVICE_ROW (object);
  if (self->devices)
    g_signal_handlers_disconnect_by_data (self->devices, self);
  g_clear_object (&self->devices);
  G_OBJECT_CLASS (hn_device_row_parent_class)->dispose (object);
}

static void
hn_device_row_finalize (GObject *object)
{
  HnDeviceRow *self = HN_DEVICE_ROW (object);
  g_array_unref (self->indices);
  g_object_unref (self->labels);
  G_OBJECT_CLASS (hn_device_row_parent_class)->finalize (object);
}

static void
hn_device_row_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  switch (prop_id)
    {
    case PROP_DEVICE_INDEX: g_value_set_int (value, HN_DEVICE_ROW (object)->device_index); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
hn_device_row_set_property (GObject *object, guint prop_id, const GValue *value, GParamSpec *pspec)
{
  switch (prop_id)
    {
    case PROP_DEVICE_INDEX: hn_device_row_set_device_index (HN_DEVICE_ROW (object), g_value_get_int (value)); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
hn_device_row_class_init (HnDeviceRowClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  object_class->dispose = hn_device_row_dispose;
  object_class->finalize = hn_device_row_finalize;
  object_class->get_property = hn_device_row_get_property;
  object_class->set_property = hn_device_row_set_property;
  properties[PROP_DEVICE_INDEX] = g_param_spec_int ("device-index", NULL, NULL, -1, G_MAXINT, -1,
                                                    G_PARAM_READWRITE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);
  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
hn_device_row_init (HnDeviceRow *self)
{
  self->device_index = -1;
  self->indices = g_array_new (FALSE, FALSE, sizeof (int));
  self->labels = gtk_string_list_new (NULL);
  adw_combo_row_set_model (ADW_COMBO_ROW (self), G_LIST_MODEL (self->labels));
  self->devices = g_object_ref (hn_devices_get_default ());
  g_signal_connect (self->devices, "notify::ready", G_CALLBACK (on_ready), self);
  g_signal_connect (self, "notify::selected", G_CALLBACK (on_selected), NULL);
  refill (self);
}

GtkWidget *
hn_device_row_new (void)
{
  return g_object_new (HN_TYPE_DEVICE_ROW, NULL);
}
