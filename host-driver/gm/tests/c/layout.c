/*
 * The layouts gm.h gives the structures GM programs touch, against GM's
 * documented layout (64-bit pointers): checked when this file compiles,
 * and printed when it runs for the test to hold against the library's
 * own offsets.
 */

#include <stddef.h>
#include <stdio.h>

#include "gm.h"

#define AT(t, f, n) _Static_assert(offsetof(t, f) == (n), #t "." #f " is at " #n)
#define SIZE(t, n) _Static_assert(sizeof(t) == (n), "sizeof " #t " is " #n)

/* Every event is one 64-byte granule, its type in the last byte. */
SIZE(gm_recv_event_t, 64);
SIZE(gm_recv_t, 64);
SIZE(gm_sent_t, 64);
SIZE(gm_tokens_sent_t, 64);
SIZE(gm_failed_send_event_t, 64);
SIZE(gm_fatal_firmware_error_t, 64);
SIZE(gm_flushed_alarm_t, 64);
SIZE(gm_ethernet_recv_t, 64);

AT(gm_recv_t, message, 32);
AT(gm_recv_t, buffer, 40);
AT(gm_recv_t, reserved_after_buffer, 48);
AT(gm_recv_t, length, 52);
AT(gm_recv_t, sender_node_id, 56);
AT(gm_recv_t, reserved_after_sender_node_id, 58);
AT(gm_recv_t, tag, 60);
AT(gm_recv_t, size, 61);
AT(gm_recv_t, sender_port_id, 62);
AT(gm_recv_t, type, 63);

AT(gm_sent_t, message_list, 48);
AT(gm_sent_t, type, 63);
AT(gm_tokens_sent_t, report, 0);
AT(gm_tokens_sent_t, type, 63);
AT(gm_failed_send_event_t, message, 48);
AT(gm_failed_send_event_t, target_node_id, 60);
AT(gm_failed_send_event_t, target_subport_id, 62);
AT(gm_failed_send_event_t, type, 63);
AT(gm_fatal_firmware_error_t, status, 56);
AT(gm_fatal_firmware_error_t, type, 63);
AT(gm_flushed_alarm_t, usecs_remaining, 56);
AT(gm_ethernet_recv_t, message, 32);
AT(gm_ethernet_recv_t, length, 52);
AT(gm_ethernet_recv_t, type, 63);

/* The alarm a program allocates. */
SIZE(gm_alarm_t, 48);
AT(gm_alarm_t, next, 0);
AT(gm_alarm_t, state, 8);
AT(gm_alarm_t, port, 16);
AT(gm_alarm_t, callback, 24);
AT(gm_alarm_t, context, 32);
AT(gm_alarm_t, deadline, 40);

/* Sized and network-order types. */
SIZE(gm_u64_t, 8);
SIZE(gm_u32_t, 4);
SIZE(gm_u16_t, 2);
SIZE(gm_u8_t, 1);
SIZE(gm_up_t, sizeof(void *));
SIZE(gm_u32_n_t, 4);
SIZE(gm_remote_ptr_t, 8);

int main(void)
{
  gm_recv_event_t e;
  /* The byte-order helpers read what the NIC writes (big-endian). */
  unsigned char be[4] = {1, 2, 3, 4};
  gm_u32_n_t n;
  __builtin_memcpy(&n, be, 4);
  if (gm_ntoh_u32(n) != 0x01020304u || gm_ntohl(gm_htonl(0xa1b2c3d4u)) != 0xa1b2c3d4u ||
      gm_ntoh_u16(gm_hton_u16(0x1234)) != 0x1234 ||
      gm_ntohll(gm_htonll(0x0102030405060708ull)) != 0x0102030405060708ull) {
    printf("byte order wrong\n");
    return 1;
  }
  (void)e;
  printf("recv.message %zu recv.buffer %zu recv.length %zu recv.sender_node_id %zu "
         "recv.tag %zu recv.size %zu recv.sender_port_id %zu recv.type %zu "
         "sent.message_list %zu fatal.status %zu alarm %zu\n",
         offsetof(gm_recv_t, message), offsetof(gm_recv_t, buffer),
         offsetof(gm_recv_t, length), offsetof(gm_recv_t, sender_node_id),
         offsetof(gm_recv_t, tag), offsetof(gm_recv_t, size),
         offsetof(gm_recv_t, sender_port_id), offsetof(gm_recv_t, type),
         offsetof(gm_sent_t, message_list), offsetof(gm_fatal_firmware_error_t, status),
         sizeof(gm_alarm_t));
  return 0;
}
