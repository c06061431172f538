from lightning_rl.cli import main

if __name__ == "__main__":
    main()
