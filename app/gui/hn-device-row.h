/* HnDeviceRow: an AdwComboRow listing "Automatic" and the Vulkan devices
 * (name, type, memory) from HnDevices; "device-index" is -1 for automatic. */
#pragma once
#include <adwaita.h>

G_BEGIN_DECLS

#define HN_TYPE_DEVICE_ROW (hn_device_row_get_type ())
G_DECLARE_FINAL_TYPE (HnDeviceRow, hn_device_row, HN, DEVICE_ROW, AdwComboRow)

GtkWidget *hn_device_row_new (void);
int hn_device_row_get_device_index (HnDeviceRow *self);
void hn_device_row_set_device_index (HnDeviceRow *self, int index);

G_END_DECLS
