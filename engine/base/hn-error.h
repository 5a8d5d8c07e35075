/* One error domain for the whole engine: every failure a user can see is a
 * GError in HN_ERROR with a specific code and a message naming the file or
 * object involved. */
#pragma once
#include <glib.h>

G_BEGIN_DECLS

#define HN_ERROR (hn_error_quark ())
GQuark hn_error_quark (void);

typedef enum {
  HN_ERROR_FAILED,           /* anything without a better code */
  HN_ERROR_INVALID_ARGUMENT, /* bad option value or API misuse */
  HN_ERROR_IO,               /* file cannot be read/written */
  HN_ERROR_CORRUPT,          /* a file from outside is malformed */
  HN_ERROR_UNSUPPORTED,      /* valid input we do not implement (fails closed) */
  HN_ERROR_NO_DEVICE,        /* no Vulkan device */
  HN_ERROR_VULKAN,           /* a Vulkan call failed */
  HN_ERROR_OUT_OF_MEMORY,    /* device or host memory exhausted */
  HN_ERROR_DEVICE_LOST,      /* VK_ERROR_DEVICE_LOST */
  HN_ERROR_CANCELLED,        /* the job was cancelled */
  HN_ERROR_NETWORK,          /* hub: network down / HTTP failure */
  HN_ERROR_AUTH,             /* hub: 401/403 */
  HN_ERROR_NOT_FOUND,        /* hub: 404, or a missing file */
  HN_ERROR_NUMERIC,          /* NaN/Inf where a finite value is required */
} HnErrorCode;

G_END_DECLS
