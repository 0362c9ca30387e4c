/* Every capture kind the DWARF compiler handles. Each probed function prints the values it
 * received, in the same order as the tests capture them, so a test compares probe vs program. */
#include <stdio.h>
#include <string.h>

typedef unsigned int flags_t;
typedef flags_t mode_bits;

struct inner {
	short depth;
	long weight;
};

struct record {
	int id;
	signed char level;
	const char *name;
	char tag[8];
	int scores[4];
	struct inner in;
	struct inner *next_in;
	unsigned int ready : 1;
	unsigned int kind : 3;
	int delta : 5;          /* signed bitfield */
	mode_bits mode : 7;     /* through a typedef chain */
	unsigned long long wide : 40;
	union {
		int as_int;
		float as_float;
	};                      /* anonymous union */
	struct {
		unsigned char r, g, b;
	} color;
};

long total_calls = 31337;
static int hidden_static = -12;

__attribute__((noinline)) int inspect(struct record *rec, int scale, const char *label)
{
	printf("inspect id=%d level=%d name=%s tag=%s scores={%d,%d,%d,%d} score2=%d depth=%d weight=%ld next_weight=%ld "
	       "ready=%u kind=%u delta=%d mode=%u wide=%llu as_int=%d g=%u scale=%d label=%s total=%ld hidden=%d\n",
	       rec->id, rec->level, rec->name, rec->tag, rec->scores[0], rec->scores[1], rec->scores[2],
	       rec->scores[3], rec->scores[2], rec->in.depth, rec->in.weight,
	       rec->next_in->weight, rec->ready, rec->kind, rec->delta, rec->mode, rec->wide, rec->as_int,
	       rec->color.g, scale, label, total_calls, hidden_static);
	total_calls++;
	return rec->id * scale + rec->delta;
}

__attribute__((noinline)) long accumulate(int n)
{
	long sum = 0;
	for (int i = 0; i < n; i++) {
		sum += i * i;
		printf("step i=%d sum=%ld\n", i, sum);  /* line probe target: STEP */
	}
	return sum;
}

int main(int argc, char **argv)
{
	struct inner other = { .depth = 3, .weight = 9000000001L };
	struct record rec = {
		.id = 4711, .level = -5, .name = "probe-me", .tag = "tagged",
		.scores = { 10, 20, 30, 40 }, .in = { .depth = -7, .weight = 123456789012L },
		.next_in = &other, .ready = 1, .kind = 5, .delta = -11, .mode = 99,
		.wide = 0xABCDE12345ULL, .color = { 1, 200, 3 },
	};
	rec.as_int = -424242;
	int result = inspect(&rec, argc + 2, argc > 1 ? argv[1] : "none");
	printf("inspect returned %d\n", result);
	printf("accumulate returned %ld\n", accumulate(4));
	return 0;
}
