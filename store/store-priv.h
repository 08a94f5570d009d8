/* store: what store.c and the store's other files share. */
#ifndef SBX_STORE_PRIV_H
#define SBX_STORE_PRIV_H

#include <pthread.h>
#include <sqlite3.h>

struct store {
	sqlite3 *db;
	pthread_mutex_t lock;
};

#endif
