/* How long one thread takes to wake another on this machine: two threads hand a token
   back and forth through POSIX semaphores, each waiting asleep for its turn; one round
   trip is two wake-ups. Run it across cores and on one core:

       gcc -O2 -pthread benchmarks/wakeup_latency.c -o /tmp/wakeup && /tmp/wakeup
       taskset -c 0 /tmp/wakeup

   It explains why worker threads sharing the GIL cannot speed up batches that take
   tens of microseconds on a VM whose idle vCPUs sleep (docs/workers.md, "Threads on
   the packed route"). */
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <time.h>

static sem_t ping, pong;
enum { ROUNDS = 20000 };

static void* other(void* unused) {
    (void)unused;
    for (int i = 0; i < ROUNDS; i++) {
        sem_wait(&ping);
        sem_post(&pong);
    }
    return NULL;
}

int main(void) {
    pthread_t thread;
    struct timespec start, end;
    sem_init(&ping, 0, 0);
    sem_init(&pong, 0, 0);
    pthread_create(&thread, NULL, other, NULL);
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (int i = 0; i < ROUNDS; i++) {
        sem_post(&ping);
        sem_wait(&pong);
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    pthread_join(thread, NULL);
    double ns = (end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec);
    printf("round trip %.1f us (%d rounds)\n", ns / ROUNDS / 1e3, ROUNDS);
    return 0;
}
