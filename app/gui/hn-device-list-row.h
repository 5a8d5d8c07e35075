/* HnDeviceListRow: an AdwExpanderRow with a check per Vulkan device (from
 * HnDevices), for jobs that run on several devices at once (data-parallel
 * training: --device-indices). "device-indices" is the selection as the
 * flag's text ("0,1"), NULL when nothing is checked. */
#pragma once
#include <adwaita.h>

G_BEGIN_DECLS

#define HN_TYPE_DEVICE_LIST_ROW (hn_device_list_row_get_type ())
G_DECLARE_FINAL_TYPE (HnDeviceListRow, hn_device_list_row, HN, DEVICE_LIST_ROW, AdwExpanderRow)

GtkWidget *hn_device_list_row_new (void);
const char *hn_device_list_row_get_device_indices (HnDeviceListRow *self);
/* Checks the devices `indices` lists ("0,1"; NULL or "" = none). The text is
 * kept as given, so a list the checks cannot show ("0,0": two logical
 * devices on one GPU) survives until a check is toggled. */
void hn_device_list_row_set_device_indices (HnDeviceListRow *self, const char *indices);
/* The check of the device with engine index `index`, or NULL (for tests). */
GtkCheckButton *hn_device_list_row_get_check (HnDeviceListRow *self, int index);

G_END_DECLS
