/*
 * gm_test.h: what the GM test programs of this directory share. Written
 * only against GM's interface (gm.h) and the C standard library, like
 * the programs; each includes it after gm.h. Its names begin with gmt_
 * (GM test), to stand apart from GM's own gm_.
 *
 * A GM program learns of everything through its port's events: a
 * message arrived, a send completed, an alarm fell due. It takes them
 * one at a time with gm_blocking_receive, handles the messages itself
 * and passes every other event to gm_unknown, which runs the callbacks
 * of completed sends and due alarms: GM runs them nowhere else. So
 * whatever a program waits for, it waits by receiving events. The
 * helpers are such waits, and the little the programs do alike around
 * them:
 *
 * - struct gmt: the program, its port and its peer; gmt_options,
 *   gmt_open, gmt_pair and gmt_close start and end it;
 * - gmt_is_message, gmt_one_event, gmt_unasked: events;
 * - gmt_pause_ms, gmt_watchdog: alarms;
 * - gmt_send_and_wait: one send and its completion;
 * - gmt_send_message, gmt_wait_message, gmt_put_be32 and the like: the
 *   8-byte control messages the programs that run in pairs exchange.
 *
 * Every helper is `static inline`: a program compiles those it uses,
 * and one it does not use costs nothing and draws no warning (a plain
 * static function left unused would, under -Wall).
 */

#ifndef GM_TEST_H
#define GM_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gm.h"

/* ---- the program ---- */

/* A test program: its name, its port, the one peer it talks to, and
   what went wrong. Each program has one, initialised with its name and
   default port id. */
struct gmt {
  const char *name;        /* starts every line the helpers print */
  struct gm_port *port;    /* opened by gmt_open */
  unsigned int port_id;    /* this port's id, and the peer's */
  unsigned int me, peer;   /* GM node ids: this process's, the peer's */
  int failures;            /* things found wrong so far */
  const char *waiting_for; /* what it waits for now, for the watchdog */
  /* What gmt_one_event does with an event the program is not waiting
     for (NULL: gm_unknown). */
  void (*handle_event)(struct gmt *t, struct gm_port *p, gm_recv_event_t *e);
};

/* Options given as `-x value`, each an unsigned number. */
struct gmt_option {
  char flag;           /* 'p' for -p */
  unsigned int *value; /* where its value goes */
};

/* Read argv as pairs `-x value` of the options in `opts` (which ends
   with {0, NULL}); 0 if an argument is no such pair. */
static inline int gmt_options(int argc, char **argv, const struct gmt_option *opts)
{
  int i;
  for (i = 1; i + 1 < argc; i += 2) {
    const struct gmt_option *o = opts;
    while (o->value && !(argv[i][0] == '-' && argv[i][1] == o->flag && argv[i][2] == '\0'))
      o++;
    if (!o->value)
      break;
    *o->value = (unsigned int)atoi(argv[i + 1]);
  }
  return i >= argc;
}

/* gm_init, then gm_open of port t->port_id of the host's NIC (unit 0)
   under the program's name; t->me is then this node's GM node id. If
   GM refuses, says why ("NAME: gm_open: ...") and returns 0. */
static inline int gmt_open(struct gmt *t)
{
  char what[64];
  gm_status_t s = gm_init();
  if (s == GM_SUCCESS)
    s = gm_open(&t->port, 0, t->port_id, t->name, GM_API_VERSION_2_0);
  if (s != GM_SUCCESS) {
    snprintf(what, sizeof what, "%s: gm_open", t->name);
    gm_perror(what, s);
    return 0;
  }
  gm_get_node_id(t->port, &t->me);
  return 1;
}

/* The programs that run in pairs run on node ids 1 and 2, each the
   other's peer. 0 (having said so) on any other node. */
static inline int gmt_pair(struct gmt *t)
{
  if (t->me != 1 && t->me != 2) {
    fprintf(stderr, "%s: node id %u: run on node ids 1 and 2\n", t->name, t->me);
    return 0;
  }
  t->peer = t->me == 1 ? 2 : 1;
  return 1;
}

/* The end of a paired program: cancel its watchdog, close its port, and
   its exit status: 0 if `ok` and nothing was found wrong, else 1 (having
   said so). */
static inline int gmt_close(struct gmt *t, gm_alarm_t *watchdog, int ok)
{
  gm_cancel_alarm(watchdog);
  gm_close(t->port);
  gm_finalize();
  if (!ok || t->failures) {
    fprintf(stderr, "%s: node id %u: failed\n", t->name, t->me);
    return 1;
  }
  return 0;
}

/* ---- events ---- */

/* Is e a message? GM has eight receive events for one: low or high
   priority (HIGH), from a port whose id is the receiver's or another
   (PEER), and with the message in its receive buffer or still in the
   event queue (FAST, to be copied with gm_memorize_message if kept). */
static inline int gmt_is_message(gm_recv_event_t *e)
{
  switch (gm_ntoh_u8(e->recv.type)) {
  case GM_RECV_EVENT:
  case GM_HIGH_RECV_EVENT:
  case GM_PEER_RECV_EVENT:
  case GM_HIGH_PEER_RECV_EVENT:
  case GM_FAST_RECV_EVENT:
  case GM_FAST_HIGH_RECV_EVENT:
  case GM_FAST_PEER_RECV_EVENT:
  case GM_FAST_HIGH_PEER_RECV_EVENT:
    return 1;
  default:
    return 0;
  }
}

/* Receive the next event of port p and handle it as t says: what every
   wait below does until what it waits for has happened. */
static inline void gmt_one_event(struct gmt *t, struct gm_port *p)
{
  gm_recv_event_t *e = gm_blocking_receive(p);
  if (t->handle_event)
    t->handle_event(t, p, e);
  else
    gm_unknown(p, e);
}

/* A handle_event for a program that takes messages only when it waits
   for one (gmt_wait_message): a message at any other time came unasked,
   which is reported and counted as a failure. */
static inline void gmt_unasked(struct gmt *t, struct gm_port *p, gm_recv_event_t *e)
{
  if (gmt_is_message(e)) {
    fprintf(stderr, "%s: node id %u: a message of %u bytes from node id %u came unasked\n",
            t->name, t->me, gm_ntoh_u32(e->recv.length), gm_ntoh_u16(e->recv.sender_node_id));
    t->failures++;
  } else {
    gm_unknown(p, e);
  }
}

/* ---- alarms ---- */

static inline void gmt_rang(void *context)
{
  *(int *)context = 1;
}

/* Wait `ms` milliseconds on an alarm of port p. A GM program pauses so
   rather than sleeping: it goes on handling the port's events meanwhile
   (completions, and the watchdog). */
static inline void gmt_pause_ms(struct gmt *t, struct gm_port *p, unsigned int ms)
{
  gm_alarm_t a;
  int rang = 0;
  gm_initialize_alarm(&a);
  gm_set_alarm(p, &a, ms * 1000ull, gmt_rang, &rang);
  while (!rang)
    gmt_one_event(t, p);
}

static inline void gmt_watchdog_rang(void *context)
{
  struct gmt *t = context;
  fprintf(stderr, "%s: node id %u: timed out waiting for %s\n", t->name, t->me, t->waiting_for);
  exit(1);
}

/* A watchdog: alarm `a` of port p ends the program with status 1 after
   `seconds`, saying what it was waiting for (t->waiting_for), so that a
   process whose peer never came, or whose completion never did, fails
   instead of hanging. Its callback runs only while the program takes
   p's events: one that waits on two ports sets one on each. Cancel it
   (gm_cancel_alarm) before closing the port. */
static inline void gmt_watchdog(struct gmt *t, struct gm_port *p, gm_alarm_t *a,
                                unsigned int seconds)
{
  gm_initialize_alarm(a);
  gm_set_alarm(p, a, seconds * 1000000ull, gmt_watchdog_rang, t);
}

/* ---- sending ---- */

/* A send's completion, as its callback reports it. */
struct gmt_send {
  int done;
  gm_status_t status;
};

static inline void gmt_sent(struct gm_port *p, void *context, gm_status_t status)
{
  struct gmt_send *s = context;
  (void)p;
  s->done = 1;
  s->status = status;
}

/* Send `len` bytes at `buf` (DMA memory) in a message of GM size `size`
   to the peer's port at low priority, and handle events until the send
   completes; its status. */
static inline gm_status_t gmt_send_and_wait(struct gmt *t, void *buf, unsigned int size,
                                            unsigned long len)
{
  struct gmt_send s = {0, GM_SUCCESS};
  gm_send_with_callback(t->port, buf, size, len, GM_LOW_PRIORITY, t->peer, t->port_id, gmt_sent,
                        &s);
  while (!s.done)
    gmt_one_event(t, t->port);
  return s.status;
}

/* ---- control messages ---- */

/* The paired programs' control messages: 8 bytes, in buffers of GM
   size 4. */
#define GMT_MSG_SIZE 4
#define GMT_MSG_LEN 8

/* How gmt_send_message tries a first message again: every 10 ms, for
   20 seconds at the most. */
#define GMT_RETRY_MS 10
#define GMT_TRIES 2000

/* Send the control message at `buf` (GMT_MSG_LEN bytes of DMA memory)
   to the peer and wait for its completion; `what` names it. 1 if it was
   delivered; else says why, counts a failure and returns 0.

   With `first`, it is the first message to the peer, which may not have
   opened its port yet: the two processes start in either order. GM
   completes a send to a port that is not open with
   GM_SEND_TARGET_PORT_CLOSED and, as after any failed send, holds every
   later send to that port until the program calls gm_resume_sending (or
   gm_drop_sends). So the send is tried again after gm_resume_sending and
   a pause, until the port is open. Any other failure, and any failure of
   a later message, is final. */
static inline int gmt_send_message(struct gmt *t, void *buf, int first, const char *what)
{
  gm_status_t s = GM_SUCCESS;
  int tries;
  t->waiting_for = what;
  for (tries = 0; tries < GMT_TRIES; tries++) {
    s = gmt_send_and_wait(t, buf, GMT_MSG_SIZE, GMT_MSG_LEN);
    if (s == GM_SUCCESS)
      return 1;
    if (!first || s != GM_SEND_TARGET_PORT_CLOSED)
      break;
    gm_resume_sending(t->port, GM_LOW_PRIORITY, t->peer, t->port_id, NULL, NULL);
    gmt_pause_ms(t, t->port, GMT_RETRY_MS);
  }
  fprintf(stderr, "%s: node id %u: sending %s: ", t->name, t->me, what);
  gm_perror("", s);
  t->failures++;
  return 0;
}

/* Wait for the next message, which must be a control message from the
   peer's port; its bytes, copied to `out`. Another message is reported
   and counted as a failure, and stands for the one awaited (its first
   bytes in `out`, zeros after). Either way the receive buffer it came
   in is the program's again, to provide anew if more are to come. */
static inline void gmt_wait_message(struct gmt *t, unsigned char out[GMT_MSG_LEN],
                                    const char *what)
{
  t->waiting_for = what;
  for (;;) {
    gm_recv_event_t *e = gm_blocking_receive(t->port);
    if (gmt_is_message(e)) {
      unsigned int len = gm_ntoh_u32(e->recv.length);
      memset(out, 0, GMT_MSG_LEN);
      if (gm_ntoh_u16(e->recv.sender_node_id) != t->peer ||
          gm_ntoh_u8(e->recv.sender_port_id) != t->port_id || len != GMT_MSG_LEN) {
        fprintf(stderr, "%s: %s: a message of %u bytes from node id %u port %u\n", t->name,
                what, len, gm_ntoh_u16(e->recv.sender_node_id),
                gm_ntoh_u8(e->recv.sender_port_id));
        t->failures++;
        if (len > GMT_MSG_LEN)
          len = GMT_MSG_LEN;
      }
      memcpy(out, gm_ntohp(e->recv.message), len);
      return;
    }
    gm_unknown(t->port, e);
  }
}

/* Numbers in messages, in network order (big-endian) whatever the
   hosts' own. */
static inline void gmt_put_be32(unsigned char *b, unsigned long v)
{
  int k;
  for (k = 0; k < 4; k++)
    b[k] = (unsigned char)(v >> (24 - 8 * k));
}

static inline unsigned long gmt_get_be32(const unsigned char *b)
{
  return (unsigned long)b[0] << 24 | (unsigned long)b[1] << 16 | (unsigned long)b[2] << 8 | b[3];
}

static inline void gmt_put_be64(unsigned char *b, gm_u64_t v)
{
  int k;
  for (k = 0; k < 8; k++)
    b[k] = (unsigned char)(v >> (56 - 8 * k));
}

static inline gm_u64_t gmt_get_be64(const unsigned char *b)
{
  gm_u64_t v = 0;
  int k;
  for (k = 0; k < 8; k++)
    v = v << 8 | b[k];
  return v;
}

/* ---- main ---- */

/* The whole main of a program that runs in pairs with options -p (the
   port) and -t (the watchdog's seconds, 30 unless told): `one` runs on
   node id 1, `two` on node id 2, each returning 1 when all went right.
   Its exit status: 0 when all went right, 1 if not, 2 for bad usage. */
static inline int gmt_pair_main(struct gmt *t, int argc, char **argv, int (*one)(void),
                                int (*two)(void))
{
  unsigned int seconds = 30;
  struct gmt_option options[] = {{'p', NULL}, {'t', NULL}, {0, NULL}};
  gm_alarm_t watchdog;
  int ok;

  options[0].value = &t->port_id;
  options[1].value = &seconds;
  if (!gmt_options(argc, argv, options) || seconds < 1) {
    fprintf(stderr, "usage: %s [-p port] [-t seconds]\n", argv[0]);
    return 2;
  }
  if (!gmt_open(t) || !gmt_pair(t))
    return 1;
  gmt_watchdog(t, t->port, &watchdog, seconds);
  ok = t->me == 1 ? one() : two();
  return gmt_close(t, &watchdog, ok);
}

#endif /* GM_TEST_H */
