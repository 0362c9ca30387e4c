/* Variables of every shape the builder's tree shows: nested and anonymous structs, bitfields,
 * arrays, char *, unions; built at -O0 (all live) and -O2 (some optimised out) by the tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct inner {
	unsigned int state : 3;
	unsigned int ready : 1;
	long count;
};

struct outer {
	int id;
	struct inner in;
	struct {
		short port;
		short family;
	};
	union {
		int as_int;
		float as_float;
	} value;
	char tag[8];
	const char *name;
	int samples[4];
	struct outer *next;
};

static long total;

__attribute__((noinline)) long visit(struct outer *o, int depth, const char *label)
{
	long weight = o->in.count * depth;
	int unused_after = depth * 3;

	total += weight + (long)strlen(label);
	if (o->next && depth < 2)
		total += visit(o->next, depth + 1, label);
	return total + o->id;
}

int main(int argc, char **argv)
{
	int calls = argc > 1 ? atoi(argv[1]) : 1;
	struct outer second = { .id = 2, .in = { 5, 1, 40 }, .port = 22, .family = 2, .name = "second" };
	struct outer first = { .id = 1, .in = { 3, 0, 10 }, .port = 80, .family = 10, .name = "first", .next = &second };

	strcpy(first.tag, "tag1");
	for (int i = 0; i < calls; i++) {
		first.id = 1 + i;
		visit(&first, 1, "walk");
	}
	printf("%ld\n", total);
	return 0;
}
