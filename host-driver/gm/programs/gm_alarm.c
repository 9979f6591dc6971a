/*
 * gm_alarm: GM's alarms, in the manner of GM's own tests. Written only
 * against GM's interface (gm.h).
 *
 *   gm_alarm [-p port]
 *
 * One process is enough (NIC_CLUSTER and NIC_NODE say where it runs);
 * several can run at once on different nodes, each on its own. It sets
 * alarms with different delays and then only handles events:
 *
 *   g   0 us     (due at once)
 *   b  10 ms
 *   d  20 ms
 *   f  25 ms     its callback sets it again, 10 ms from then
 *   a  30 ms
 *   e   5 ms     set again at once, before it can run, to 40 ms
 *   c  50 ms     cancelled by b's callback
 *   z  80 ms     the last: when it has run, the program looks back
 *
 * It also cancels b after it ran, and an alarm never set: neither may
 * disturb the others. With gm_ticks (half microseconds) read before and
 * after each gm_set_alarm and in each callback, it checks that every
 * callback ran as many times as its alarm was set (c never), not before
 * its deadline and not more than a second after, and in deadline order:
 * no alarm ran after one whose deadline was surely later than its own.
 * It prints a line per alarm and "gm_alarm: ok"; exit status 0 when all
 * is right, 1 if not (with the reason on stderr).
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gm.h"

#define TICKS_PER_US 2ull
/* How late a callback may run: the process may wait for the processor
   on a busy machine, but an alarm that only runs when something else
   happens would be seconds late. */
#define MAX_LATE_TICKS (1000000ull * TICKS_PER_US)

static struct gm_port *port;
static int failures;

/* One alarm of the test: what it was set to, when, and its runs. */
struct test_alarm {
  const char *name;
  gm_alarm_t alarm;
  gm_u64_t usecs;
  /* gm_ticks just before and just after its last gm_set_alarm: its
     deadline lies between these plus the delay. */
  gm_u64_t set_lo, set_hi;
  int runs, want_runs;
  gm_u64_t ran[2];
  /* Deadline bounds of each run, as they were when it ran. */
  gm_u64_t due_lo[2], due_hi[2];
};


enum { G, B, D, F, A, E, C, Z, NALARMS };
static struct test_alarm alarms[NALARMS] = {
    [G] = {.name = "g", .usecs = 0, .want_runs = 1},
    [B] = {.name = "b", .usecs = 10000, .want_runs = 1},
    [D] = {.name = "d", .usecs = 20000, .want_runs = 1},
    [F] = {.name = "f", .usecs = 25000, .want_runs = 2},
    [A] = {.name = "a", .usecs = 30000, .want_runs = 1},
    [E] = {.name = "e", .usecs = 5000, .want_runs = 1},
    [C] = {.name = "c", .usecs = 50000, .want_runs = 0},
    [Z] = {.name = "z", .usecs = 80000, .want_runs = 1},
};
#define F_AGAIN_US 10000ull
#define E_AGAIN_US 40000ull

/* Every run, in the order they happened. */
static struct run {
  int which, nth;
} order[2 * NALARMS];
static int nrun;
static gm_u64_t last_ticks;

/* gm_ticks, checked never to go back. */
static gm_u64_t ticks(void)
{
  gm_u64_t t = gm_ticks(port);
  if (t < last_ticks) {
    fprintf(stderr, "gm_alarm: gm_ticks went back from %llu to %llu\n", last_ticks, t);
    failures++;
  }
  last_ticks = t;
  return t;
}

static void set(struct test_alarm *t, gm_u64_t usecs, void (*callback)(void *))
{
  t->usecs = usecs;
  t->set_lo = ticks();
  gm_set_alarm(port, &t->alarm, usecs, callback, t);
  t->set_hi = ticks();
}

static void ran(void *context)
{
  struct test_alarm *t = context;
  gm_u64_t now = ticks();
  if (t->runs < 2) {
    t->ran[t->runs] = now;
    t->due_lo[t->runs] = t->set_lo + t->usecs * TICKS_PER_US;
    t->due_hi[t->runs] = t->set_hi + t->usecs * TICKS_PER_US;
  }
  if (nrun < (int)(sizeof order / sizeof order[0])) {
    order[nrun].which = (int)(t - alarms);
    order[nrun].nth = t->runs;
    nrun++;
  }
  t->runs++;
}

/* b's callback: it cancels c, which is set and not due (c's deadline
   is 40 ms after b's: it cannot have run before b, and a callback may
   change the alarms, as f's does). */
static void ran_and_cancel(void *context)
{
  ran(context);
  gm_cancel_alarm(&alarms[C].alarm);
}

/* f's callback: the first time, it sets its own alarm again (a GM
   callback may: the alarm is free once its callback runs). */
static void ran_and_again(void *context)
{
  struct test_alarm *t = context;
  ran(context);
  if (t->runs == 1)
    set(t, F_AGAIN_US, ran_and_again);
}

static const char *waiting_for = "the start";
static gm_alarm_t watchdog;

static void watchdog_rang(void *context)
{
  (void)context;
  fprintf(stderr, "gm_alarm: timed out waiting for %s\n", waiting_for);
  exit(1);
}

static long long us(gm_u64_t t)
{
  return (long long)(t / TICKS_PER_US);
}

/* The runs of alarm t: as many as wanted, none early or much late. */
static void check_alarm(struct test_alarm *t, gm_u64_t start)
{
  int k;
  if (t->runs != t->want_runs) {
    fprintf(stderr, "gm_alarm: alarm %s ran %d times, not %d\n", t->name, t->runs, t->want_runs);
    failures++;
    return;
  }
  for (k = 0; k < t->runs && k < 2; k++) {
    printf("  alarm %s run %d: due at +%lld us, ran at +%lld us\n", t->name, k + 1,
           us(t->due_lo[k] - start), us(t->ran[k] - start));
    if (t->ran[k] < t->due_lo[k]) {
      fprintf(stderr, "gm_alarm: alarm %s ran %lld us before its deadline\n", t->name,
              us(t->due_lo[k] - t->ran[k]));
      failures++;
    } else if (t->ran[k] > t->due_hi[k] + MAX_LATE_TICKS) {
      fprintf(stderr, "gm_alarm: alarm %s ran %lld us after its deadline\n", t->name,
              us(t->ran[k] - t->due_hi[k]));
      failures++;
    }
  }
}

int main(int argc, char **argv)
{
  unsigned int port_id = 2, me = 0;
  struct test_alarm *b = &alarms[B], *e = &alarms[E], *z = &alarms[Z];
  gm_alarm_t never_set;
  gm_u64_t start;
  gm_status_t s;
  int i, j, cancelled = 0;

  for (i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-p"))
      port_id = (unsigned int)atoi(argv[i + 1]);
    else
      break;
  }
  if (i < argc) {
    fprintf(stderr, "usage: %s [-p port]\n", argv[0]);
    return 2;
  }

  s = gm_init();
  if (s == GM_SUCCESS)
    s = gm_open(&port, 0, port_id, "gm_alarm", GM_API_VERSION_2_0);
  if (s != GM_SUCCESS) {
    gm_perror("gm_alarm: gm_open", s);
    return 1;
  }
  gm_get_node_id(port, &me);
  gm_initialize_alarm(&watchdog);
  gm_set_alarm(port, &watchdog, 30000000ull, watchdog_rang, NULL);

  for (i = 0; i < NALARMS; i++)
    gm_initialize_alarm(&alarms[i].alarm);
  gm_initialize_alarm(&never_set);

  /* No event is handled while they are set: e's first 5 ms cannot run
     before it is set again, however long setting them takes. */
  start = ticks();
  for (i = 0; i < NALARMS; i++)
    set(&alarms[i], alarms[i].usecs, i == F ? ran_and_again : i == B ? ran_and_cancel : ran);
  set(e, E_AGAIN_US, ran);
  /* Cancelling an alarm that was never set does nothing. */
  gm_cancel_alarm(&never_set);

  waiting_for = "the alarms";
  while (z->runs == 0) {
    gm_recv_event_t *ev = gm_blocking_receive(port);
    switch (gm_ntoh_u8(ev->recv.type)) {
    case GM_RECV_EVENT:
    case GM_HIGH_RECV_EVENT:
    case GM_PEER_RECV_EVENT:
    case GM_HIGH_PEER_RECV_EVENT:
    case GM_FAST_RECV_EVENT:
    case GM_FAST_HIGH_RECV_EVENT:
    case GM_FAST_PEER_RECV_EVENT:
    case GM_FAST_HIGH_PEER_RECV_EVENT:
      fprintf(stderr, "gm_alarm: a message came to a port no one sends to\n");
      failures++;
      break;
    default:
      gm_unknown(port, ev);
    }
    /* b has run: cancelling it now must change nothing. */
    if (b->runs > 0 && !cancelled) {
      cancelled = 1;
      gm_cancel_alarm(&b->alarm);
    }
  }

  for (i = 0; i < NALARMS; i++)
    check_alarm(&alarms[i], start);

  /* Deadline order: a run that came after another had a deadline that
     was not surely earlier than the other's. */
  for (i = 0; i < nrun; i++)
    for (j = i + 1; j < nrun; j++) {
      struct test_alarm *x = &alarms[order[i].which], *y = &alarms[order[j].which];
      int n = order[i].nth, m = order[j].nth;
      if (y->due_hi[m] < x->due_lo[n]) {
        fprintf(stderr, "gm_alarm: alarm %s (due +%lld us) ran after alarm %s (due +%lld us)\n",
                y->name, us(y->due_hi[m] - start), x->name, us(x->due_lo[n] - start));
        failures++;
      }
    }

  printf("gm_alarm: node id %u: ran", me);
  for (i = 0; i < nrun; i++)
    printf(" %s", alarms[order[i].which].name);
  printf("\n");
  if (failures == 0) {
    for (i = 0; i < NALARMS; i++) {
      struct test_alarm *t = &alarms[i];
      if (i == C)
        printf("alarm %s: cancelled, never ran\n", t->name);
      else
        printf("alarm %s: ran %s, not early\n", t->name, t->runs == 2 ? "twice" : "once");
    }
    printf("alarm order: every callback in deadline order\n");
  }

  gm_cancel_alarm(&watchdog);
  gm_close(port);
  gm_finalize();
  if (failures) {
    fprintf(stderr, "gm_alarm: %d failures\n", failures);
    return 1;
  }
  printf("gm_alarm: ok\n");
  return 0;
}
