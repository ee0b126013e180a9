#include <stdio.h>

int main(void) {
	printf("hello from inside the domain\n");
	return 0;
}
