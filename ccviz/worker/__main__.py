from .process import main

main()
