#include "hn-devices.h"

#include <glib/gi18n.h>
#include <gio/gio.h>

/* The Vulkan core's device report (engine/vk) is used once it is part of the
 * build; until then the list never becomes ready and the rows keep saying
 * "Detecting devices…" rather than showing a made-up list. */
#if defined(__has_include)
#if __has_include("vk/hn-vk.h")
#include "vk/hn-vk.h"
#define HN_GUI_HAVE_VK_DEVICES 1
#endif
#endif

struct _HnDevices
{
  GObject parent_instance;
  gboolean ready;
  GPtrArray *entries;
  char *error;
};

enum { PROP_0, PROP_READY, N_PROPS };
static GParamSpec *properties[N_PROPS];

G_DEFINE_FINAL_TYPE (HnDevices, hn_devices, G_TYPE_OBJECT)

static void
entry_free (HnDeviceEntry *e)
{
  g_free (e->name);
  g_free (e->type);
  g_free (e);
}

char *
hn_device_entry_describe (const HnDeviceEntry *e)
{
  const char *type = g_str_equal (e->type, "discrete") ? _("dedicated GPU")
                     : g_str_equal (e->type, "integrated") ? _("integrated GPU")
                     : g_str_equal (e->type, "cpu") ? _("software, runs on the CPU")
                     : g_str_equal (e->type, "virtual") ? _("virtual GPU") : _("other");
  g_autofree char *mem = g_format_size (e->memory);
  return g_strdup_printf ("%s · %s · %s", e->name, type, mem);
}

#ifdef HN_GUI_HAVE_VK_DEVICES
static void
enumerate_thread (GTask *task, gpointer source, gpointer data, GCancellable *cancellable)
{
  GError *error = NULL;
  g_autoptr (GPtrArray) infos = hn_vk_list_devices (&error);
  if (!infos)
    {
      g_task_return_error (task, error);
      return;
    }
  GPtrArray *entries = g_ptr_array_new_with_free_func ((GDestroyNotify) entry_free);
  for (guint i = 0; i < infos->len; i++)
    {
      const HnVkDeviceInfo *info = g_ptr_array_index (infos, i);
      HnDeviceEntry *e = g_new0 (HnDeviceEntry, 1);
      e->index = info->index;
      e->name = g_strdup (info->name);
      e->type = g_strdup (info->type);
      e->memory = hn_vk_device_info_local_bytes (info);
      g_ptr_array_add (entries, e);
    }
  g_task_return_pointer (task, entries, (GDestroyNotify) g_ptr_array_unref);
}

static void
enumerate_done (GObject *source, GAsyncResult *result, gpointer data)
{
  HnDevices *self = HN_DEVICES (source);
  g_autoptr (GError) error = NULL;
  GPtrArray *entries = g_task_propagate_pointer (G_TASK (result), &error);
  if (entries)
    {
      g_ptr_array_unref (self->entries);
      self->entries = entries;
    }
  else
    self->error = g_strdup (error->message);
  self->ready = TRUE;
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_READY]);
}
#endif

static void
hn_devices_finalize (GObject *object)
{
  HnDevices *self = HN_DEVICES (object);
  g_ptr_array_unref (self->entries);
  g_free (self->error);
  G_OBJECT_CLASS (hn_devices_parent_class)->finalize (object);
}

static void
hn_devices_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  switch (prop_id)
    {
    case PROP_READY: g_value_set_boolean (value, HN_DEVICES (object)->ready); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
hn_devices_class_init (HnDevicesClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  object_class->finalize = hn_devices_finalize;
  object_class->get_property = hn_devices_get_property;
  properties[PROP_READY] = g_param_spec_boolean ("ready", NULL, NULL, FALSE,
                                                 G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
hn_devices_init (HnDevices *self)
{
  self->entries = g_ptr_array_new_with_free_func ((GDestroyNotify) entry_free);
}

HnDevices *
hn_devices_get_default (void)
{
  static HnDevices *instance;
  if (!instance)
    {
      instance = g_object_new (HN_TYPE_DEVICES, NULL);
      /* kept for the life of the process: devices do not come and go */
#ifdef HN_GUI_HAVE_VK_DEVICES
      GTask *task = g_task_new (instance, NULL, enumerate_done, NULL);
      g_task_run_in_thread (task, enumerate_thread);
      g_object_unref (task);
#endif
    }
  return instance;
}

gboolean
hn_devices_is_ready (HnDevices *self)
{
  return self->ready;
}

GPtrArray *
hn_devices_get_entries (HnDevices *self)
{
  return self->entries;
}

const char *
hn_devices_get_error (HnDevices *self)
{
  return self->error;
}

gboolean
hn_devices_only_software (HnDevices *self)
{
  if (!self->ready || self->entries->len == 0)
    return FALSE;
  for (guint i = 0; i < self->entries->len; i++)
    if (!g_str_equal (((HnDeviceEntry *) g_ptr_array_index (self->entries, i))->type, "cpu"))
      return FALSE;
  return TRUE;
}
