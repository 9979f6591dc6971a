/*
 * gm.h: the GM programming interface of the emulated NIC.
 *
 * A program written against Myricom's GM (API versions 1.0 to 2.0.16)
 * compiles against this header and links with libgm (libgm.so or
 * libgm.a, built by `cargo xtask gm build`). The library drives a port of
 * an emulated NIC of a live or qemu cluster through the project's host
 * driver. Which cluster and which node a process uses: NIC_CLUSTER and
 * NIC_NODE (or an MPI launcher's rank); see docs/gm-api.md, which also
 * lists every call with its status here.
 *
 * The names, types, numbers and layouts below are those of GM's
 * documented interface, so that programs written for GM build unchanged.
 * The header includes no other header, as GM's did not.
 */

#ifndef _gm_h_
#define _gm_h_

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ */
/* API versions                                                         */
/* ------------------------------------------------------------------ */

#define GM_API_VERSION_1_0 0x100
#define GM_API_VERSION_1_1 0x101
#define GM_API_VERSION_1_2 0x102
#define GM_API_VERSION_1_3 0x103
#define GM_API_VERSION_1_4 0x104
#define GM_API_VERSION_1_5 0x105
#define GM_API_VERSION_1_6 0x106
#define GM_API_VERSION_2_0 0x200
#define GM_API_VERSION_2_0_6 0x20006
#define GM_API_VERSION_2_0_12 0x2000c
#define GM_API_VERSION_2_0_16 0x20010

/* A program may ask for an older interface by defining GM_API_VERSION
   before including this file; the default is the newest. */
#ifndef GM_API_VERSION
#define GM_API_VERSION GM_API_VERSION_2_0_16
#endif

/* Versions up to 2.0 are 0xMmm; later ones 0xMMmmss. */
#define GM_API_MAJOR                                                        \
  ((GM_API_VERSION & 0xffff) == GM_API_VERSION ? GM_API_VERSION >> 8       \
                                               : GM_API_VERSION >> 16)
#define GM_API_MINOR                                                        \
  ((GM_API_VERSION & 0xffff) == GM_API_VERSION ? GM_API_VERSION & 0xff     \
                                               : (GM_API_VERSION >> 8) & 0xff)
#define GM_API_SUBMINOR                                                     \
  ((GM_API_VERSION & 0xffff) == GM_API_VERSION ? 0 : GM_API_VERSION & 0xff)

#if GM_API_VERSION < GM_API_VERSION_1_0
#error GM_API_VERSION is older than any GM interface (1.0).
#elif GM_API_VERSION > GM_API_VERSION_2_0_16
#error GM_API_VERSION is newer than this library provides (2.0.16).
#endif

/* ------------------------------------------------------------------ */
/* Limits                                                               */
/* ------------------------------------------------------------------ */

#define GM_MAX_HOST_NAME_LEN 128
#define GM_MAX_PORT_NAME_LEN 32
#define GM_NO_SUCH_NODE_ID 0

/* ------------------------------------------------------------------ */
/* The host CPU                                                         */
/* ------------------------------------------------------------------ */

#ifndef GM_KERNEL
#define GM_KERNEL 0
#endif
#ifndef GM_BUILDING_GM
#define GM_BUILDING_GM 0
#endif
#ifndef GM_BUILDING_FIRMWARE
#define GM_BUILDING_FIRMWARE 0
#endif
#ifndef GM_BUILDING_INTERNALS
#define GM_BUILDING_INTERNALS 0
#endif

#if defined(__x86_64__) || defined(_M_AMD64)
#define GM_CPU_x86_64 1
#elif defined(__i386__) || defined(__i386) || defined(_M_IX86)
#define GM_CPU_x86 1
#elif defined(__ia64__)
#define GM_CPU_ia64 1
#elif defined(__powerpc64__)
#define GM_CPU_powerpc64 1
#elif defined(__powerpc__)
#define GM_CPU_powerpc 1
#endif
#ifndef GM_CPU_x86_64
#define GM_CPU_x86_64 0
#endif
#ifndef GM_CPU_x86
#define GM_CPU_x86 0
#endif
#ifndef GM_CPU_ia64
#define GM_CPU_ia64 0
#endif
#ifndef GM_CPU_powerpc64
#define GM_CPU_powerpc64 0
#endif
#ifndef GM_CPU_powerpc
#define GM_CPU_powerpc 0
#endif
#define GM_CPU_alpha 0
#define GM_CPU_hppa 0
#define GM_CPU_lanai 0
#define GM_CPU_mips 0
#define GM_CPU_sparc 0
#define GM_CPU_sparc64 0

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define GM_CPU_BIGENDIAN 1
#else
#define GM_CPU_BIGENDIAN 0
#endif

#if defined(__LP64__) || defined(_WIN64)
#define GM_SIZEOF_VOID_P 8
#else
#define GM_SIZEOF_VOID_P 4
#endif
/* A client's user pointers are the size of its own pointers. */
#define GM_SIZEOF_UP_T GM_SIZEOF_VOID_P

#ifndef gm_inline
#if defined(__GNUC__)
#define gm_inline __inline__
#else
#define gm_inline
#endif
#endif

#ifndef GM_ENTRY_POINT
#define GM_ENTRY_POINT
#endif

/* ------------------------------------------------------------------ */
/* Sized types                                                          */
/* ------------------------------------------------------------------ */

typedef signed long long gm_s64_t;
typedef unsigned long long gm_u64_t;
typedef signed int gm_s32_t;
typedef unsigned int gm_u32_t;
typedef signed short gm_s16_t;
typedef unsigned short gm_u16_t;
typedef signed char gm_s8_t;
typedef unsigned char gm_u8_t;

/* A user virtual address, as wide as the client's pointers. */
#if GM_SIZEOF_UP_T == 8
typedef gm_u64_t gm_up_t;
#else
typedef gm_u32_t gm_up_t;
#endif

/* An address in another process: always 64 bits. */
typedef gm_u64_t gm_remote_ptr_t;

#if GM_SIZEOF_VOID_P == 8
typedef unsigned long gm_size_t;
typedef signed long gm_offset_t;
#else
typedef unsigned long gm_size_t;
typedef signed long gm_offset_t;
#endif

/* ------------------------------------------------------------------ */
/* Values in network byte order                                         */
/* ------------------------------------------------------------------ */

/* Fields the NIC writes are big-endian. By default each is wrapped in a
   one-member struct, so that reading one without gm_ntoh* is a compile
   error; GM_STRONG_TYPES 0 makes them plain integers. */
#ifndef GM_STRONG_TYPES
#define GM_STRONG_TYPES 1
#endif

#if GM_STRONG_TYPES
typedef struct { gm_remote_ptr_t n; } gm_remote_ptr_n_t;
typedef struct { gm_s64_t n; } gm_s64_n_t;
typedef struct { gm_s32_t n; } gm_s32_n_t;
typedef struct { gm_s16_t n; } gm_s16_n_t;
typedef struct { gm_s8_t n; } gm_s8_n_t;
typedef struct { gm_u64_t n; } gm_u64_n_t;
typedef struct { gm_u32_t n; } gm_u32_n_t;
typedef struct { gm_u16_t n; } gm_u16_n_t;
typedef struct { gm_u8_t n; } gm_u8_n_t;
typedef struct { gm_up_t n; } gm_up_n_t;
#define GM_N(x) ((x).n)
#else
typedef gm_remote_ptr_t gm_remote_ptr_n_t;
typedef gm_s64_t gm_s64_n_t;
typedef gm_s32_t gm_s32_n_t;
typedef gm_s16_t gm_s16_n_t;
typedef gm_s8_t gm_s8_n_t;
typedef gm_u64_t gm_u64_n_t;
typedef gm_u32_t gm_u32_n_t;
typedef gm_u16_t gm_u16_n_t;
typedef gm_u8_t gm_u8_n_t;
typedef gm_up_t gm_up_n_t;
#define GM_N(x) (x)
#endif
typedef gm_up_n_t gm_up_n_up_n_t;

/* Byte reversal. */
gm_inline static gm_u16_t __gm_swap_u16(gm_u16_t x)
{
  return (gm_u16_t)((x >> 8) | (x << 8));
}
gm_inline static gm_u32_t __gm_swap_u32(gm_u32_t x)
{
  return (x >> 24) | ((x >> 8) & 0xff00u) | ((x & 0xff00u) << 8) | (x << 24);
}
gm_inline static gm_u64_t __gm_swap_u64(gm_u64_t x)
{
  return ((gm_u64_t)__gm_swap_u32((gm_u32_t)x) << 32) |
         __gm_swap_u32((gm_u32_t)(x >> 32));
}

#if GM_CPU_BIGENDIAN
#define __GM_BE16(x) (x)
#define __GM_BE32(x) (x)
#define __GM_BE64(x) (x)
#else
#define __GM_BE16(x) __gm_swap_u16(x)
#define __GM_BE32(x) __gm_swap_u32(x)
#define __GM_BE64(x) __gm_swap_u64(x)
#endif

/* Network to host. */
gm_inline static gm_u8_t gm_ntoh_u8(gm_u8_n_t x) { return GM_N(x); }
gm_inline static gm_s8_t gm_ntoh_s8(gm_s8_n_t x) { return GM_N(x); }
gm_inline static gm_u16_t gm_ntoh_u16(gm_u16_n_t x)
{
  return __GM_BE16(GM_N(x));
}
gm_inline static gm_s16_t gm_ntoh_s16(gm_s16_n_t x)
{
  return (gm_s16_t)__GM_BE16((gm_u16_t)GM_N(x));
}
gm_inline static gm_u32_t gm_ntoh_u32(gm_u32_n_t x)
{
  return __GM_BE32(GM_N(x));
}
gm_inline static gm_s32_t gm_ntoh_s32(gm_s32_n_t x)
{
  return (gm_s32_t)__GM_BE32((gm_u32_t)GM_N(x));
}
gm_inline static gm_u64_t gm_ntoh_u64(gm_u64_n_t x)
{
  return __GM_BE64(GM_N(x));
}
gm_inline static gm_s64_t gm_ntoh_s64(gm_s64_n_t x)
{
  return (gm_s64_t)__GM_BE64((gm_u64_t)GM_N(x));
}

/* Host to network. */
gm_inline static gm_u8_n_t gm_hton_u8(gm_u8_t x)
{
  gm_u8_n_t r;
  GM_N(r) = x;
  return r;
}
gm_inline static gm_s8_n_t gm_hton_s8(gm_s8_t x)
{
  gm_s8_n_t r;
  GM_N(r) = x;
  return r;
}
gm_inline static gm_u16_n_t gm_hton_u16(gm_u16_t x)
{
  gm_u16_n_t r;
  GM_N(r) = __GM_BE16(x);
  return r;
}
gm_inline static gm_s16_n_t gm_hton_s16(gm_s16_t x)
{
  gm_s16_n_t r;
  GM_N(r) = (gm_s16_t)__GM_BE16((gm_u16_t)x);
  return r;
}
gm_inline static gm_u32_n_t gm_hton_u32(gm_u32_t x)
{
  gm_u32_n_t r;
  GM_N(r) = __GM_BE32(x);
  return r;
}
gm_inline static gm_s32_n_t gm_hton_s32(gm_s32_t x)
{
  gm_s32_n_t r;
  GM_N(r) = (gm_s32_t)__GM_BE32((gm_u32_t)x);
  return r;
}
gm_inline static gm_u64_n_t gm_hton_u64(gm_u64_t x)
{
  gm_u64_n_t r;
  GM_N(r) = __GM_BE64(x);
  return r;
}
gm_inline static gm_s64_n_t gm_hton_s64(gm_s64_t x)
{
  gm_s64_n_t r;
  GM_N(r) = (gm_s64_t)__GM_BE64((gm_u64_t)x);
  return r;
}

/* The older short names. */
gm_inline static gm_u8_t gm_ntohc(gm_u8_n_t x) { return gm_ntoh_u8(x); }
gm_inline static gm_u16_t gm_ntohs(gm_u16_n_t x) { return gm_ntoh_u16(x); }
gm_inline static gm_u32_t gm_ntohl(gm_u32_n_t x) { return gm_ntoh_u32(x); }
gm_inline static gm_u64_t gm_ntohll(gm_u64_n_t x) { return gm_ntoh_u64(x); }
gm_inline static gm_u8_n_t gm_htonc(gm_u8_t x) { return gm_hton_u8(x); }
gm_inline static gm_u16_n_t gm_htons(gm_u16_t x) { return gm_hton_u16(x); }
gm_inline static gm_u32_n_t gm_htonl(gm_u32_t x) { return gm_hton_u32(x); }
gm_inline static gm_u64_n_t gm_htonll(gm_u64_t x) { return gm_hton_u64(x); }

/* A user pointer the NIC wrote, as a pointer. */
gm_inline static void *gm_ntohp(gm_up_n_t x)
{
#if GM_SIZEOF_UP_T == 8
  return (void *)(gm_size_t)__GM_BE64(GM_N(x));
#else
  return (void *)(gm_size_t)__GM_BE32(GM_N(x));
#endif
}

/* PCI configuration space is little-endian. */
gm_inline static gm_u32_t gm_htopci_u32(gm_u32_t x)
{
#if GM_CPU_BIGENDIAN
  return __gm_swap_u32(x);
#else
  return x;
#endif
}

/* ------------------------------------------------------------------ */
/* Assertions and small macros                                          */
/* ------------------------------------------------------------------ */

#ifndef GM_DEBUG
#define GM_DEBUG 0
#endif

GM_ENTRY_POINT void _gm_assertion_failed(const char *, int, const char *);

#ifndef __GM_FILE__
#define __GM_FILE__ __FILE__
#endif

#define _gm_always_assert(a, txt)                                           \
  do {                                                                      \
    if (!(a))                                                               \
      _gm_assertion_failed(txt, __LINE__, __GM_FILE__);                     \
  } while (0)
#define gm_always_assert(a) _gm_always_assert(a, #a)
#if GM_DEBUG
#define gm_assert(a) _gm_always_assert(a, #a)
#else
#define gm_assert(a)                                                        \
  do {                                                                      \
    if (0)                                                                  \
      (void)(a);                                                            \
  } while (0)
#endif
#define gm_assert_p(a) gm_assert(a)
#define GM_ABORT() _gm_assertion_failed("0", __LINE__, __GM_FILE__)

#define GM_PARAMETER_MAY_BE_UNUSED(p) ((void)(p))
#define GM_VAR_MAY_BE_UNUSED(v) ((void)(v))
#define GM_LOOPS_FOREVER()                                                  \
  {                                                                         \
    if (0)                                                                  \
      break;                                                                \
  }

#define __GM_MISALIGNMENT(n, m) ((gm_size_t)(n) & ((gm_size_t)(m) - 1))
#define GM_ALIGNED(n, m) (__GM_MISALIGNMENT(n, m) == 0)
#define GM_MISALIGNMENT(n, m) __GM_MISALIGNMENT(n, m)
#define GM_OFFSETOF(type, field) ((gm_offset_t) & ((type *)0)->field)
#define GM_STRUCT_CONTAINING(type, field, field_instance)                   \
  ((type *)((char *)(field_instance)-GM_OFFSETOF(type, field)))
#define GM_NUM_ELEM(ar) (sizeof(ar) / sizeof(*ar))
#define GM_POWER_OF_TWO(n) (!((n) & ((n)-1)))

/* DMA granularity: events are written in units of the RDMA granule. */
#define GM_RDMA_GRANULARITY 64
#define GM_MAX_DMA_GRANULARITY 8
#define GM_DMA_GRANULARITY GM_MAX_DMA_GRANULARITY
#define GM_DMA_ALIGNED(p) GM_ALIGNED(p, GM_DMA_GRANULARITY)

/* ------------------------------------------------------------------ */
/* Status codes                                                         */
/* ------------------------------------------------------------------ */

typedef enum gm_status {
  GM_SUCCESS = 0,
  GM_FAILURE = 1,
  GM_INPUT_BUFFER_TOO_SMALL = 2,
  GM_OUTPUT_BUFFER_TOO_SMALL = 3,
  GM_TRY_AGAIN = 4,
  GM_BUSY = 5,
  GM_MEMORY_FAULT = 6,
  GM_INTERRUPTED = 7,
  GM_INVALID_PARAMETER = 8,
  GM_OUT_OF_MEMORY = 9,
  GM_INVALID_COMMAND = 10,
  GM_PERMISSION_DENIED = 11,
  GM_INTERNAL_ERROR = 12,
  GM_UNATTACHED = 13,
  GM_UNSUPPORTED_DEVICE = 14,
  /* Completion codes of a send. */
  GM_SEND_TIMED_OUT = 15,
  GM_SEND_REJECTED = 16,
  GM_SEND_TARGET_PORT_CLOSED = 17,
  GM_SEND_TARGET_NODE_UNREACHABLE = 18,
  GM_SEND_DROPPED = 19,
  GM_SEND_PORT_CLOSED = 20,
  GM_NODE_ID_NOT_YET_SET = 21,
  GM_STILL_SHUTTING_DOWN = 22,
  GM_CLONE_BUSY = 23,
  GM_NO_SUCH_DEVICE = 24,
  GM_ABORTED = 25,
#if GM_API_VERSION >= GM_API_VERSION_1_5
  GM_INCOMPATIBLE_LIB_AND_DRIVER = 26,
  GM_UNTRANSLATED_SYSTEM_ERROR = 27,
  GM_ACCESS_DENIED = 28,
#endif
#if GM_API_VERSION >= GM_API_VERSION_2_0
  GM_NO_DRIVER_SUPPORT = 29,
  GM_PTE_REF_CNT_OVERFLOW = 30,
  GM_NOT_SUPPORTED_IN_KERNEL = 31,
  GM_NOT_SUPPORTED_ON_ARCH = 32,
  GM_NO_MATCH = 33,
  GM_USER_ERROR = 34,
  GM_TIMED_OUT = 35,
  GM_DATA_CORRUPTED = 36,
  GM_HARDWARE_FAULT = 37,
  GM_SEND_ORPHANED = 38,
  GM_MINOR_OVERFLOW = 39,
  GM_PAGE_TABLE_FULL = 40,
  GM_UC_ERROR = 41,
  GM_INVALID_PORT_NUMBER = 42,
  GM_DEV_NOT_FOUND = 43,
  GM_FIRMWARE_NOT_RUNNING = 44,
  GM_YP_NO_MATCH = 45,
  GM_SRAM_PARITY_ERROR = 46,
  GM_FIRMWARE_ABORT = 47,
#endif
  GM_NUM_STATUS_CODES,
  GM_NUM_ERROR_CODES = GM_NUM_STATUS_CODES
} gm_status_t;

enum gm_priority {
  GM_LOW_PRIORITY = 0,
  GM_HIGH_PRIORITY = 1,
  GM_NUM_PRIORITIES = 2
};

enum gm_buf_status { gm_in_send = 0, gm_in_recv, gm_in_app, gm_invalid_status };

struct gm_buf_handle {
  void *addr;
  int size;
  enum gm_buf_status status;
  struct gm_buf_handle *next;
};

struct gm_port;

/* An alarm: storage the client owns (gm_initialize_alarm, gm_set_alarm). */
typedef struct gm_alarm {
  struct gm_alarm *next;
  enum { GM_ALARM_FREE = 0, GM_ALARM_SET } state;
  struct gm_port *port;
  void (*callback)(void *context);
  void *context;
  gm_u64_t deadline;
} gm_alarm_t;

enum gm_api_version {
  _GM_API_VERSION_1_0 = GM_API_VERSION_1_0,
  _GM_API_VERSION_1_1 = GM_API_VERSION_1_1,
  _GM_API_VERSION_1_2 = GM_API_VERSION_1_2,
  _GM_API_VERSION_1_3 = GM_API_VERSION_1_3,
  _GM_API_VERSION_1_4 = GM_API_VERSION_1_4,
  _GM_API_VERSION_1_5 = GM_API_VERSION_1_5,
  _GM_API_VERSION_1_6 = GM_API_VERSION_1_6,
  _GM_API_VERSION_2_0 = GM_API_VERSION_2_0,
  _GM_API_VERSION_2_0_6 = GM_API_VERSION_2_0_6,
  _GM_API_VERSION_2_0_12 = GM_API_VERSION_2_0_12,
  _GM_API_VERSION_2_0_16 = GM_API_VERSION_2_0_16,
  __GM_API_VERSION_IGNORE_COMMA
};

/* ------------------------------------------------------------------ */
/* Receive events                                                       */
/* ------------------------------------------------------------------ */

enum gm_recv_event_type {
  GM_NO_RECV_EVENT = 0,
  GM_SENDS_FAILED_EVENT = 1,
  GM_ALARM_EVENT = 2,
  GM_SENT_EVENT = 3,
  _GM_SLEEP_EVENT = 4,
  GM_RAW_RECV_EVENT = 5,
  GM_BAD_SEND_DETECTED_EVENT = 6,
  GM_SEND_TOKEN_VIOLATION_EVENT = 7,
  GM_RECV_TOKEN_VIOLATION_EVENT = 8,
  GM_BAD_RECV_TOKEN_EVENT = 9,
  GM_ALARM_VIOLATION_EVENT = 10,
  GM_RECV_EVENT = 11,
  GM_HIGH_RECV_EVENT = 12,
  GM_PEER_RECV_EVENT = 13,
  GM_HIGH_PEER_RECV_EVENT = 14,
  GM_FAST_RECV_EVENT = 15,
  GM_FAST_HIGH_RECV_EVENT = 16,
  GM_FAST_PEER_RECV_EVENT = 17,
  GM_FAST_HIGH_PEER_RECV_EVENT = 18,
  GM_REJECTED_SEND_EVENT = 19,
  GM_ORPHANED_SEND_EVENT = 20,
  GM_BAD_RESEND_DETECTED_EVENT = 24,
  GM_DROPPED_SEND_EVENT = 25,
  GM_BAD_SEND_VMA_EVENT = 26,
  GM_BAD_RECV_VMA_EVENT = 27,
  _GM_FLUSHED_ALARM_EVENT = 28,
  GM_SENT_TOKENS_EVENT = 29,
  GM_IGNORE_RECV_EVENT = 30,
  GM_ETHERNET_RECV_EVENT = 31,
  GM_FATAL_FIRMWARE_ERROR_EVENT = 32,
  /* The same, as the NIC marks an event it has just written. */
  GM_NEW_NO_RECV_EVENT = 128,
  GM_NEW_SENDS_FAILED_EVENT = 129,
  GM_NEW_ALARM_EVENT = 130,
  GM_NEW_SENT_EVENT = 131,
  _GM_NEW_SLEEP_EVENT = 132,
  GM_NEW_RAW_RECV_EVENT = 133,
  GM_NEW_BAD_SEND_DETECTED_EVENT = 134,
  GM_NEW_SEND_TOKEN_VIOLATION_EVENT = 135,
  GM_NEW_RECV_TOKEN_VIOLATION_EVENT = 136,
  GM_NEW_BAD_RECV_TOKEN_EVENT = 137,
  GM_NEW_ALARM_VIOLATION_EVENT = 138,
  GM_NEW_RECV_EVENT = 139,
  GM_NEW_HIGH_RECV_EVENT = 140,
  GM_NEW_PEER_RECV_EVENT = 141,
  GM_NEW_HIGH_PEER_RECV_EVENT = 142,
  GM_NEW_FAST_RECV_EVENT = 143,
  GM_NEW_FAST_HIGH_RECV_EVENT = 144,
  GM_NEW_FAST_PEER_RECV_EVENT = 145,
  GM_NEW_FAST_HIGH_PEER_RECV_EVENT = 146,
  GM_NEW_REJECTED_SEND_EVENT = 147,
  GM_NEW_ORPHANED_SEND_EVENT = 148,
  _GM_NEW_PUT_NOTIFICATION_EVENT = 149,
  GM_NEW_FREE_SEND_TOKEN_EVENT = 150,
  GM_NEW_FREE_HIGH_SEND_TOKEN_EVENT = 151,
  GM_NEW_BAD_RESEND_DETECTED_EVENT = 152,
  GM_NEW_DROPPED_SEND_EVENT = 153,
  GM_NEW_BAD_SEND_VMA_EVENT = 154,
  GM_NEW_BAD_RECV_VMA_EVENT = 155,
  _GM_NEW_FLUSHED_ALARM_EVENT = 156,
  GM_NEW_SENT_TOKENS_EVENT = 157,
  GM_NEW_IGNORE_RECV_EVENT = 158,
  GM_NEW_ETHERNET_RECV_EVENT = 159,
  GM_NEW_FATAL_FIRMWARE_ERROR_EVENT = 160,
  GM_NUM_RECV_EVENT_TYPES
};

/* Every event is one RDMA granule (64 bytes) with its type in the last
   byte. The first 32 bytes of the larger ones are padding. */
#define __GM_EVENT_PAD (GM_RDMA_GRANULARITY - 32)

/* A message received (the RECV, PEER and FAST types). */
typedef struct gm_recv {
  gm_u8_n_t _rdma_padding[__GM_EVENT_PAD];
#if GM_SIZEOF_UP_T == 4
  gm_u32_n_t message_pad;
#endif
  gm_up_n_t message; /* where the message is */
#if GM_SIZEOF_UP_T == 4
  gm_u32_n_t buffer_pad;
#endif
  gm_up_n_t buffer; /* the receive buffer it matched */
  gm_u32_n_t reserved_after_buffer;
  gm_u32_n_t length;
  gm_u16_n_t sender_node_id;
  gm_u16_n_t reserved_after_sender_node_id;
  gm_u8_n_t tag;
  gm_u8_n_t size;
  gm_u8_n_t sender_port_id;
  gm_u8_n_t type;
} gm_recv_t;

struct _gm_sent_token_report {
  gm_u8_n_t token;
  gm_u8_n_t status;
};

#define GM_MAX_SENT_TOKEN_REPORTS_PER_EVENT ((GM_RDMA_GRANULARITY / 2) - 1)

typedef struct gm_tokens_sent {
  struct _gm_sent_token_report report[GM_MAX_SENT_TOKEN_REPORTS_PER_EVENT];
  gm_u8_n_t reserved_before_type;
  gm_u8_n_t type;
} gm_tokens_sent_t;

/* Sends completed (handled by gm_unknown, which runs their callbacks). */
typedef struct gm_sent {
  gm_u8_n_t _rdma_padding[__GM_EVENT_PAD];
  gm_u8_n_t _reserved[16];
#if GM_SIZEOF_UP_T == 4
  gm_u8_n_t _reserved_before_message_list[4];
#endif
  gm_up_n_up_n_t message_list;
  gm_u8_n_t _reserved_after_message_list[8 - 1];
  gm_u8_n_t type;
} gm_sent_t;

typedef struct gm_failed_send_event {
  gm_u8_n_t _rdma_padding[__GM_EVENT_PAD];
  gm_u8_n_t _reserved[16];
#if GM_SIZEOF_UP_T == 4
  gm_u32_n_t message_pad;
#endif
  gm_up_n_t message;
  gm_u32_n_t reserved_after_message;
  gm_u16_n_t target_node_id;
  gm_u8_n_t target_subport_id;
  gm_u8_n_t type;
} gm_failed_send_event_t;

typedef struct gm_fatal_firmware_error {
  gm_u8_n_t _rdma_padding[__GM_EVENT_PAD];
  gm_u8_n_t _reserved[32 - 8];
  gm_u32_n_t status;
  gm_u8_n_t reserved_after_status[3];
  gm_u8_n_t type;
} gm_fatal_firmware_error_t;

typedef struct gm_flushed_alarm {
  gm_u8_n_t _rdma_padding[__GM_EVENT_PAD];
  gm_u8_n_t _reserved[32 - 8];
  gm_u32_n_t usecs_remaining;
  gm_u8_n_t reserved_after_usecs_remaining[3];
  gm_u8_n_t type;
} gm_flushed_alarm_t;

#define GM_IPV4_PARTIAL_CHECKSUM 0x1
#define GM_TCP_UDP_HEADER_SPLIT 0x2

typedef struct gm_ethernet_recv {
  gm_u8_n_t _rdma_padding[__GM_EVENT_PAD];
#if (16 + 2 * GM_SIZEOF_UP_T) % 32
  gm_u8_n_t _reserved[32 - (16 + 2 * GM_SIZEOF_UP_T) % 32];
#endif
  gm_up_n_t message;
  gm_up_n_t buffer;
  gm_u16_n_t ip_checksum;
  gm_u16_n_t ip_header_len;
  gm_u32_n_t length;
  gm_u16_n_t sender_node_id;
  gm_u8_n_t flags;
  gm_u8_n_t reserved_after_flags;
  gm_u8_n_t tag;
  gm_u8_n_t size;
  gm_u8_n_t sender_port_id;
  gm_u8_n_t type;
} gm_ethernet_recv_t;

/* What gm_receive returns: one of the above, all 64 bytes, the type in
   the last byte of each. */
typedef union gm_recv_event {
  gm_tokens_sent_t tokens_sent;
  gm_recv_t recv;
  gm_sent_t sent;
  gm_failed_send_event_t failed_send;
  gm_fatal_firmware_error_t fatal_firmware_error;
  gm_flushed_alarm_t flushed_alarm;
  gm_ethernet_recv_t ethernet_recv;
} gm_recv_event_t;

#define GM_RECV_EVENT_TYPE(e) (gm_ntoh_u8((e)->recv.type))

typedef void (*gm_send_completion_callback_t)(struct gm_port *p, void *context,
                                              gm_status_t status);

/* The host page size (set by gm_init or gm_open). */
#if !defined GM_PAGE_LEN
extern GM_ENTRY_POINT unsigned long GM_PAGE_LEN;
#endif

/* ------------------------------------------------------------------ */
/* Calls                                                                */
/* ------------------------------------------------------------------ */

/* Initialisation and ports. */
GM_ENTRY_POINT gm_status_t gm_init(void);
GM_ENTRY_POINT void gm_finalize(void);
GM_ENTRY_POINT gm_status_t gm_open(struct gm_port **p, unsigned int unit,
                                   unsigned int port, const char *port_name,
                                   enum gm_api_version version);
GM_ENTRY_POINT void gm_close(struct gm_port *p);
GM_ENTRY_POINT unsigned int gm_get_port_id(struct gm_port *p);
GM_ENTRY_POINT unsigned int gm_num_ports(struct gm_port *p);
GM_ENTRY_POINT unsigned int gm_num_send_tokens(struct gm_port *p);
GM_ENTRY_POINT unsigned int gm_num_receive_tokens(struct gm_port *p);
GM_ENTRY_POINT unsigned int gm_mtu(struct gm_port *port);
GM_ENTRY_POINT unsigned int gm_min_message_size(struct gm_port *port);
GM_ENTRY_POINT gm_u64_t gm_ticks(struct gm_port *port);

/* Nodes and names. */
GM_ENTRY_POINT gm_status_t gm_get_node_id(struct gm_port *port, unsigned int *n);
GM_ENTRY_POINT gm_status_t gm_max_node_id(struct gm_port *port, unsigned int *n);
GM_ENTRY_POINT gm_status_t gm_max_node_id_inuse(struct gm_port *port,
                                                unsigned int *n);
GM_ENTRY_POINT gm_status_t gm_get_host_name(struct gm_port *port,
                                            char name[GM_MAX_HOST_NAME_LEN]);
GM_ENTRY_POINT gm_status_t gm_get_node_type(struct gm_port *port, int *node_type);
GM_ENTRY_POINT unsigned int gm_host_name_to_node_id(struct gm_port *port,
                                                    char *_host_name);
GM_ENTRY_POINT char *gm_node_id_to_host_name(struct gm_port *port,
                                             unsigned int node_id);
GM_ENTRY_POINT gm_status_t gm_get_unique_board_id(struct gm_port *port,
                                                  char unique[6]);
GM_ENTRY_POINT gm_status_t gm_get_mapper_unique_id(struct gm_port *port,
                                                   char unique[6]);
GM_ENTRY_POINT gm_status_t gm_unique_id(struct gm_port *port, char unique[6]);
GM_ENTRY_POINT gm_status_t gm_node_id_to_unique_id(struct gm_port *port,
                                                   unsigned int n,
                                                   char unique[6]);
GM_ENTRY_POINT gm_status_t gm_unique_id_to_node_id(struct gm_port *port,
                                                   char unique[6],
                                                   unsigned int *node_id);
GM_ENTRY_POINT gm_status_t _gm_get_route(struct gm_port *p, unsigned int node_id,
                                         char *route, unsigned int *len);

/* Memory. */
GM_ENTRY_POINT void *gm_dma_malloc(struct gm_port *p, gm_size_t length);
GM_ENTRY_POINT void *gm_dma_calloc(struct gm_port *p, gm_size_t count,
                                   gm_size_t length);
GM_ENTRY_POINT void gm_dma_free(struct gm_port *p, void *addr);
GM_ENTRY_POINT gm_status_t gm_register_memory(struct gm_port *p, void *ptr,
                                              gm_size_t length);
GM_ENTRY_POINT gm_status_t gm_deregister_memory(struct gm_port *p, void *ptr,
                                                gm_size_t length);
GM_ENTRY_POINT gm_status_t gm_allow_remote_memory_access(struct gm_port *p);

/* Sizes. */
GM_ENTRY_POINT gm_size_t gm_max_length_for_size(unsigned int size);
GM_ENTRY_POINT unsigned int gm_min_size_for_length(gm_size_t length);
GM_ENTRY_POINT gm_status_t gm_set_acceptable_sizes(struct gm_port *p,
                                                   enum gm_priority priority,
                                                   gm_size_t mask);

/* Receiving. */
GM_ENTRY_POINT void gm_provide_receive_buffer(struct gm_port *p, void *ptr,
                                              unsigned int size,
                                              unsigned int priority);
GM_ENTRY_POINT void gm_provide_receive_buffer_with_tag(struct gm_port *p,
                                                       void *ptr,
                                                       unsigned int size,
                                                       unsigned int priority,
                                                       unsigned int tag);
GM_ENTRY_POINT union gm_recv_event *gm_receive(struct gm_port *p);
GM_ENTRY_POINT union gm_recv_event *gm_blocking_receive(struct gm_port *p);
GM_ENTRY_POINT union gm_recv_event *
gm_blocking_receive_no_spin(struct gm_port *p);
GM_ENTRY_POINT int gm_receive_pending(struct gm_port *p);
GM_ENTRY_POINT int gm_next_event_peek(struct gm_port *p, gm_u16_t *sender);
GM_ENTRY_POINT void gm_unknown(struct gm_port *p, union gm_recv_event *e);
GM_ENTRY_POINT void *gm_memorize_message(void *message, void *buffer,
                                         unsigned int len);

/* Sending. */
GM_ENTRY_POINT void gm_send_with_callback(
    struct gm_port *p, void *message, unsigned int size, gm_size_t len,
    unsigned int priority, unsigned int target_node_id,
    unsigned int target_port_id, gm_send_completion_callback_t callback,
    void *context);
GM_ENTRY_POINT void gm_send_to_peer_with_callback(
    struct gm_port *p, void *message, unsigned int size, gm_size_t len,
    unsigned int priority, unsigned int target_node_id,
    gm_send_completion_callback_t callback, void *context);
GM_ENTRY_POINT void gm_send(struct gm_port *p, void *message, unsigned int size,
                            gm_size_t len, unsigned int priority,
                            unsigned int target_node_id,
                            unsigned int target_port_id);
GM_ENTRY_POINT void gm_send_to_peer(struct gm_port *p, void *message,
                                    unsigned int size, gm_size_t len,
                                    unsigned int priority,
                                    unsigned int target_node_id);
GM_ENTRY_POINT void gm_datagram_send(struct gm_port *p, void *message,
                                     unsigned int size, gm_size_t len,
                                     unsigned int priority,
                                     unsigned int target_node_id,
                                     unsigned int target_port_id,
                                     gm_send_completion_callback_t callback,
                                     void *context);
GM_ENTRY_POINT void gm_datagram_send_4(struct gm_port *p, gm_u32_t message,
                                       unsigned int size, gm_size_t len,
                                       unsigned int priority,
                                       unsigned int target_node_id,
                                       unsigned int target_port_id,
                                       gm_send_completion_callback_t callback,
                                       void *context);
GM_ENTRY_POINT void gm_directed_send(struct gm_port *p, void *source_buffer,
                                     gm_remote_ptr_t target_buffer,
                                     gm_size_t len, enum gm_priority priority,
                                     unsigned int target_node_id,
                                     unsigned int target_port_id);
GM_ENTRY_POINT void gm_directed_send_with_callback(
    struct gm_port *p, void *source_buffer, gm_remote_ptr_t target_buffer,
    gm_size_t len, enum gm_priority priority, unsigned int target_node_id,
    unsigned int target_port_id, gm_send_completion_callback_t callback,
    void *context);
GM_ENTRY_POINT int gm_alloc_send_token(struct gm_port *p, unsigned int priority);
GM_ENTRY_POINT void gm_free_send_token(struct gm_port *p, unsigned int priority);
GM_ENTRY_POINT void gm_free_send_tokens(struct gm_port *p, unsigned int priority,
                                        unsigned int count);
GM_ENTRY_POINT int gm_send_token_available(struct gm_port *p,
                                           unsigned int priority);

/* After a failed send. */
GM_ENTRY_POINT void gm_resume_sending(struct gm_port *p, unsigned int priority,
                                      unsigned int target_node_id,
                                      unsigned int target_port_id,
                                      gm_send_completion_callback_t callback,
                                      void *context);
GM_ENTRY_POINT void gm_drop_sends(struct gm_port *port, unsigned int priority,
                                  unsigned int target_node_id,
                                  unsigned int target_port_id,
                                  gm_send_completion_callback_t callback,
                                  void *context);
GM_ENTRY_POINT gm_status_t gm_set_enable_nack_down(struct gm_port *port,
                                                   int flag);

/* Alarms. */
struct gm_alarm;
GM_ENTRY_POINT void gm_initialize_alarm(struct gm_alarm *my_alarm);
GM_ENTRY_POINT void gm_set_alarm(struct gm_port *p, struct gm_alarm *my_alarm,
                                 gm_u64_t usecs, void (*callback)(void *),
                                 void *context);
GM_ENTRY_POINT void gm_cancel_alarm(struct gm_alarm *gm_alarm);
GM_ENTRY_POINT void gm_flush_alarm(struct gm_port *p);

/* Messages about status codes, and leaving. */
GM_ENTRY_POINT char *gm_strerror(gm_status_t error);
GM_ENTRY_POINT void gm_perror(const char *message, gm_status_t error);
GM_ENTRY_POINT void gm_exit(gm_status_t status);
GM_ENTRY_POINT void gm_abort(void);
typedef void (*gm_on_exit_callback_t)(gm_status_t status, void *arg);
GM_ENTRY_POINT gm_status_t gm_on_exit(gm_on_exit_callback_t, void *arg);

/* Utilities. */
GM_ENTRY_POINT void gm_bcopy(const void *from, void *to, gm_size_t len);
GM_ENTRY_POINT void gm_bzero(void *ptr, gm_size_t len);
GM_ENTRY_POINT void *gm_memset(void *s, int c, gm_size_t n);
GM_ENTRY_POINT int gm_memcmp(const void *a, const void *b, gm_size_t len);
GM_ENTRY_POINT void *gm_malloc(gm_size_t len);
GM_ENTRY_POINT void *gm_calloc(gm_size_t len, gm_size_t cnt);
GM_ENTRY_POINT void gm_free(void *ptr);
GM_ENTRY_POINT void *gm_page_alloc(void);
GM_ENTRY_POINT void gm_page_free(void *addr);
GM_ENTRY_POINT void *gm_alloc_pages(gm_size_t len);
GM_ENTRY_POINT void gm_free_pages(void *addr, gm_size_t len);
GM_ENTRY_POINT gm_size_t gm_strlen(const char *cptr);
GM_ENTRY_POINT char *gm_strncpy(char *to, const char *from, int len);
GM_ENTRY_POINT int gm_strcmp(const char *a, const char *b);
GM_ENTRY_POINT int gm_strncmp(const char *a, const char *b, int len);
GM_ENTRY_POINT int gm_strncasecmp(const char *a, const char *b, int len);
GM_ENTRY_POINT char *gm_strdup(const char *);
GM_ENTRY_POINT int gm_isprint(int c);
GM_ENTRY_POINT void gm_hex_dump(const void *ptr, gm_size_t len);
GM_ENTRY_POINT int gm_sleep(unsigned seconds);
typedef gm_u32_t gm_pid_t;
GM_ENTRY_POINT gm_pid_t gm_getpid(void);
GM_ENTRY_POINT int gm_printf(const char *format, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 1, 2)))
#endif
    ;
GM_ENTRY_POINT int gm_eprintf(const char *format, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 1, 2)))
#endif
    ;
GM_ENTRY_POINT unsigned long gm_crc(void *ptr, gm_size_t len);
GM_ENTRY_POINT unsigned long gm_crc_str(const char *ptr);
GM_ENTRY_POINT int gm_rand(void);
GM_ENTRY_POINT void gm_srand(int seed);
GM_ENTRY_POINT unsigned int gm_rand_mod(unsigned int modulus);
GM_ENTRY_POINT extern const unsigned char gm_log2_roundup_table[257];
GM_ENTRY_POINT unsigned long gm_log2_roundup(unsigned long n);

/* Buffer debugging. */
GM_ENTRY_POINT void gm_dump_buffers(void);
GM_ENTRY_POINT void gm_register_buffer(void *addr, int size);
GM_ENTRY_POINT int gm_unregister_buffer(void *addr, int size);

/* Lookaside lists. */
struct gm_lookaside;
GM_ENTRY_POINT struct gm_lookaside *gm_create_lookaside(gm_size_t entry_len,
                                                        gm_size_t min_entry_cnt);
GM_ENTRY_POINT void gm_destroy_lookaside(struct gm_lookaside *l);
GM_ENTRY_POINT void *gm_lookaside_alloc(struct gm_lookaside *l);
GM_ENTRY_POINT void *gm_lookaside_zalloc(struct gm_lookaside *l);
GM_ENTRY_POINT void gm_lookaside_free(void *ptr);

/* Hash tables. */
#define GM_HASH_SMOOTH 1
struct gm_hash;
GM_ENTRY_POINT struct gm_hash *
gm_create_hash(long (*gm_user_compare)(void *key1, void *key2),
               unsigned long (*gm_user_hash)(void *key1), gm_size_t key_len,
               gm_size_t data_len, gm_size_t gm_min_entries, int flags);
GM_ENTRY_POINT void gm_destroy_hash(struct gm_hash *h);
GM_ENTRY_POINT void *gm_hash_remove(struct gm_hash *hash, void *key);
GM_ENTRY_POINT void *gm_hash_find(struct gm_hash *hash, void *key);
GM_ENTRY_POINT gm_status_t gm_hash_insert(struct gm_hash *hash, void *key,
                                          void *datum);
GM_ENTRY_POINT void gm_hash_rekey(struct gm_hash *hash, void *old_key,
                                  void *new_key);
GM_ENTRY_POINT long gm_hash_compare_strings(void *key1, void *key2);
GM_ENTRY_POINT unsigned long gm_hash_hash_string(void *key);
GM_ENTRY_POINT long gm_hash_compare_longs(void *key1, void *key2);
GM_ENTRY_POINT unsigned long gm_hash_hash_long(void *key);
GM_ENTRY_POINT long gm_hash_compare_ints(void *key1, void *key2);
GM_ENTRY_POINT unsigned long gm_hash_hash_int(void *key);
GM_ENTRY_POINT long gm_hash_compare_ptrs(void *key1, void *key2);
GM_ENTRY_POINT unsigned long gm_hash_hash_ptr(void *key);

/* Mutexes. */
struct gm_mutex;
GM_ENTRY_POINT struct gm_mutex *gm_create_mutex(void);
GM_ENTRY_POINT void gm_destroy_mutex(struct gm_mutex *mu);
GM_ENTRY_POINT void gm_mutex_enter(struct gm_mutex *mu);
GM_ENTRY_POINT void gm_mutex_exit(struct gm_mutex *mu);

/* Zones. */
struct gm_zone;
GM_ENTRY_POINT struct gm_zone *gm_zone_create_zone(void *base, gm_size_t len);
GM_ENTRY_POINT void gm_zone_destroy_zone(struct gm_zone *zone);
GM_ENTRY_POINT void *gm_zone_free(struct gm_zone *zone, void *a);
GM_ENTRY_POINT void *gm_zone_malloc(struct gm_zone *zone, gm_size_t length);
GM_ENTRY_POINT void *gm_zone_calloc(struct gm_zone *zone, gm_size_t count,
                                    gm_size_t length);
GM_ENTRY_POINT int gm_zone_addr_in_zone(struct gm_zone *zone, void *p);

/* Mark sets. */
typedef gm_size_t gm_mark_t;
struct gm_mark_set;
GM_ENTRY_POINT gm_status_t gm_mark(struct gm_mark_set *set, gm_mark_t *m);
GM_ENTRY_POINT int gm_mark_is_valid(struct gm_mark_set *set, gm_mark_t *m);
GM_ENTRY_POINT gm_status_t gm_create_mark_set(struct gm_mark_set **set,
                                              unsigned long init_count);
GM_ENTRY_POINT void gm_destroy_mark_set(struct gm_mark_set *set);
GM_ENTRY_POINT void gm_unmark(struct gm_mark_set *set, gm_mark_t *m);
GM_ENTRY_POINT void gm_unmark_all(struct gm_mark_set *set);

/* Handlers gm_unknown calls (deprecated as entry points). */
GM_ENTRY_POINT void gm_handle_put_notification(struct gm_port *p,
                                               gm_recv_event_t *e);
GM_ENTRY_POINT void gm_handle_sent_tokens(struct gm_port *p, gm_recv_event_t *e);

/* Copies between processes of one host. */
GM_ENTRY_POINT gm_status_t gm_directcopy_get(struct gm_port *p,
                                             void *source_addr,
                                             void *target_addr,
                                             gm_size_t length,
                                             unsigned int source_instance_id,
                                             unsigned int source_port_id);

#if GM_API_VERSION >= GM_API_VERSION_1_4
GM_ENTRY_POINT gm_status_t gm_max_node_id_in_use(struct gm_port *port,
                                                 unsigned int *n);
#endif

#if GM_API_VERSION >= GM_API_VERSION_2_0
/* Remote memory access. */
GM_ENTRY_POINT void gm_get(struct gm_port *p, gm_remote_ptr_t remote_buffer,
                           void *local_buffer, gm_size_t len,
                           enum gm_priority priority,
                           unsigned int target_node_id,
                           unsigned int target_port_id,
                           gm_send_completion_callback_t callback,
                           void *context);
GM_ENTRY_POINT void gm_put(struct gm_port *p, void *local_buffer,
                           gm_remote_ptr_t remote_buffer, gm_size_t len,
                           enum gm_priority priority,
                           unsigned int target_node_id,
                           unsigned int target_port_id,
                           gm_send_completion_callback_t callback,
                           void *context);

/* Node ids as other nodes see them. */
GM_ENTRY_POINT gm_status_t gm_global_id_to_node_id(struct gm_port *port,
                                                   unsigned int global_id,
                                                   unsigned int *node_id);
GM_ENTRY_POINT gm_status_t gm_node_id_to_global_id(struct gm_port *port,
                                                   unsigned int node_id,
                                                   unsigned int *global_id);
GM_ENTRY_POINT gm_status_t gm_node_id_to_host_name_ex(
    struct gm_port *port, unsigned int timeout_usecs, unsigned int node_id,
    char (*name)[GM_MAX_HOST_NAME_LEN + 1]);
GM_ENTRY_POINT gm_status_t gm_host_name_to_node_id_ex(
    struct gm_port *port, unsigned int timeout_usecs, const char *host_name,
    unsigned int *node_id);
#endif

#if GM_API_VERSION >= GM_API_VERSION_2_0_6
GM_ENTRY_POINT gm_status_t gm_register_memory_ex(struct gm_port *p, void *ptr,
                                                 gm_size_t length, void *pvma);
#endif

#if (GM_API_MAJOR == 2 && GM_API_MINOR == 0 && GM_API_SUBMINOR >= 16) ||     \
    GM_API_MAJOR >= 3
#define GM_HAVE_YP 1
#endif

#ifdef GM_HAVE_YP
#define GM_MAX_YP_STRING_LEN 128
GM_ENTRY_POINT gm_status_t gm_yp(struct gm_port *p, unsigned int timeout_usecs,
                                 unsigned int *node_id, const char *key,
                                 const char *value,
                                 char (*answer)[GM_MAX_YP_STRING_LEN]);
#endif

#ifdef __cplusplus
}
#endif

#endif /* _gm_h_ */
