/*
 * mpi_gm_ring: an MPI program that bootstraps with MPI and then talks
 * over GM, as GM's MPI transports did: each rank opens a GM port, the
 * ranks exchange their GM node ids and the addresses of a DMA region
 * with MPI_Allgather, and then each rank sends a message to the next
 * rank over GM and puts a block into the next rank's region. Every byte
 * is checked. Run it under an MPI launcher on a cluster whose nodes are
 * at least as many as the ranks (rank r opens node r):
 *
 *   NIC_CLUSTER=nic mpirun -np 2 mpi_gm_ring
 *
 * Exit status 0 when every rank got what it should, 1 otherwise.
 */

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gm.h"

#define PORT 3
#define SIZE 12
#define BLOCK 1000

static int pending;
static int failures;

static void done(struct gm_port *p, void *context, gm_status_t status)
{
  (void)p;
  (void)context;
  pending--;
  if (status != GM_SUCCESS) {
    gm_perror("mpi_gm_ring: a send or put failed", status);
    failures++;
  }
}

static unsigned char byte_of(int rank, int i)
{
  return (unsigned char)(rank * 37 + i * 11 + 5);
}

int main(int argc, char **argv)
{
  int rank, ranks, i, next, prev;
  struct gm_port *port;
  unsigned int me, *ids;
  gm_u64_t *regions;
  unsigned char *msg, *inbox, *region;
  gm_status_t s;

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  next = (rank + 1) % ranks;
  prev = (rank + ranks - 1) % ranks;

  s = gm_open(&port, 0, PORT, "mpi_gm_ring", GM_API_VERSION_2_0);
  if (s != GM_SUCCESS) {
    gm_perror("mpi_gm_ring: gm_open", s);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  gm_get_node_id(port, &me);
  msg = gm_dma_malloc(port, gm_max_length_for_size(SIZE));
  inbox = gm_dma_malloc(port, gm_max_length_for_size(SIZE));
  region = gm_dma_calloc(port, 1, 3 * BLOCK);
  ids = malloc(ranks * sizeof *ids);
  regions = malloc(ranks * sizeof *regions);
  if (!msg || !inbox || !region || !ids || !regions) {
    fprintf(stderr, "mpi_gm_ring: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

  /* The bootstrap: every rank learns every rank's GM node id and the
     address of its region (a GM remote pointer). */
  {
    gm_u64_t mine = (gm_u64_t)(gm_size_t)region;
    MPI_Allgather(&me, 1, MPI_UNSIGNED, ids, 1, MPI_UNSIGNED, MPI_COMM_WORLD);
    MPI_Allgather(&mine, 1, MPI_UNSIGNED_LONG_LONG, regions, 1, MPI_UNSIGNED_LONG_LONG,
                  MPI_COMM_WORLD);
  }

  /* Everyone's buffer is with GM before anyone sends. */
  gm_provide_receive_buffer(port, inbox, SIZE, GM_LOW_PRIORITY);
  MPI_Barrier(MPI_COMM_WORLD);

  for (i = 0; i < BLOCK; i++)
    msg[i] = byte_of(rank, i);
  pending = 2;
  gm_send_with_callback(port, msg, SIZE, BLOCK, GM_LOW_PRIORITY, ids[next], PORT, done, NULL);
  /* Into the middle third of the next rank's region. */
  gm_put(port, msg, regions[next] + BLOCK, BLOCK, GM_LOW_PRIORITY, ids[next], PORT, done, NULL);

  {
    int got = 0;
    while (!got || pending > 0) {
      gm_recv_event_t *e = gm_blocking_receive(port);
      switch (gm_ntoh_u8(e->recv.type)) {
      case GM_RECV_EVENT:
      case GM_PEER_RECV_EVENT:
      case GM_FAST_RECV_EVENT:
      case GM_FAST_PEER_RECV_EVENT: {
        unsigned char *m = gm_ntohp(e->recv.message);
        unsigned int len = gm_ntoh_u32(e->recv.length);
        if (gm_ntoh_u16(e->recv.sender_node_id) != ids[prev] || len != BLOCK) {
          fprintf(stderr, "mpi_gm_ring: rank %d: %u bytes from node id %u\n", rank, len,
                  gm_ntoh_u16(e->recv.sender_node_id));
          failures++;
        }
        for (i = 0; i < BLOCK && i < (int)len; i++)
          if (m[i] != byte_of(prev, i)) {
            fprintf(stderr, "mpi_gm_ring: rank %d: message byte %d wrong\n", rank, i);
            failures++;
            break;
          }
        got = 1;
        break;
      }
      default:
        gm_unknown(port, e);
      }
    }
  }

  /* Every put has landed once every rank's own completed. */
  MPI_Barrier(MPI_COMM_WORLD);
  for (i = 0; i < 3 * BLOCK; i++) {
    unsigned char want = (i >= BLOCK && i < 2 * BLOCK) ? byte_of(prev, i - BLOCK) : 0;
    if (region[i] != want) {
      fprintf(stderr, "mpi_gm_ring: rank %d: region byte %d is %u, not %u\n", rank, i,
              region[i], want);
      failures++;
      break;
    }
  }

  if (!failures)
    printf("mpi_gm_ring: rank %d of %d (node id %u): message and put from rank %d intact\n",
           rank, ranks, me, prev);
  gm_close(port);
  {
    int all;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    failures = all;
  }
  MPI_Finalize();
  return failures ? 1 : 0;
}
