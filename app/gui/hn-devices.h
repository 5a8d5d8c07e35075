/* HnDevices: the Vulkan devices the engine reports, enumerated once on a
 * worker thread (the loader can take a while) and shared by every device
 * row and the software-device banner. Until the list is in, "ready" is FALSE
 * and rows say "Detecting devices…". */
#pragma once
#include <glib-object.h>

G_BEGIN_DECLS

typedef struct {
  int index;        /* the engine's device index (--device-index) */
  char *name;
  char *type;       /* "discrete", "integrated", "virtual", "cpu", "other" */
  guint64 memory;   /* largest device-local heap, bytes */
} HnDeviceEntry;

#define HN_TYPE_DEVICES (hn_devices_get_type ())
G_DECLARE_FINAL_TYPE (HnDevices, hn_devices, HN, DEVICES, GObject)

/* The process-wide list; starts enumerating on first use. */
HnDevices *hn_devices_get_default (void);
gboolean hn_devices_is_ready (HnDevices *self);
/* Entries (HnDeviceEntry*), empty until ready. */
GPtrArray *hn_devices_get_entries (HnDevices *self);
/* Why the list is empty once ready (no loader, no device), or NULL. */
const char *hn_devices_get_error (HnDevices *self);
/* TRUE once ready when every device is a software (CPU) device. */
gboolean hn_devices_only_software (HnDevices *self);
/* "name · type · 8.0 GB" */
char *hn_device_entry_describe (const HnDeviceEntry *entry);

G_END_DECLS
